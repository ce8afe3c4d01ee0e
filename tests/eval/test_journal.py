"""The evaluation journal round-trips every response, and a model name never writes outside --output_path."""

from __future__ import annotations

import pytest

from mmreason.eval.model import sanitize
from mmreason.eval.output import RunFiles


@pytest.mark.parametrize("odd", ["\u2028", "\u2029", "\u0085", "\x1c", "\r", "\x0b"])
def test_a_response_with_a_unicode_line_break_survives_resume(tmp_path, odd):
    files = RunFiles.open(tmp_path, "m", {"k": 1})
    records = [{"doc_id": "a", "response": f"first{odd}second"}, {"doc_id": "b", "response": "plain"}]
    files.append("task", records)
    again = RunFiles.open(tmp_path, "m", {"k": 1})  # the same config resumes the pending run
    assert again.resumed
    assert again.read_journal("task") == {"a": records[0], "b": records[1]}
    assert again.read_journal("task") == {"a": records[0], "b": records[1]}  # and the file was not rewritten


def test_a_model_name_never_names_a_folder_above_the_output(tmp_path):
    out = tmp_path / "results"
    for spec in ("..", "../..", ".", "./..", "/abs/path", "a/../../b"):
        files = RunFiles.open(out, sanitize(spec), {"spec": spec})
        assert out.resolve() in files.root.resolve().parents, spec
    assert not [p for p in tmp_path.iterdir() if p.name != "results"]
    with pytest.raises(ValueError, match="outside --output_path"):
        RunFiles.open(out, "..", {})


def test_a_metric_that_raises_fails_that_doc_s_metric_and_the_run_goes_on(shapes_cache):
    import dataclasses

    import torch

    from mmreason.eval.generate import Completion
    from mmreason.eval.report import task_results
    from mmreason.eval.scoring import score_record
    from mmreason.eval.tasks import load_task
    from mmreason.rollout.prompts import PromptInputs

    task = load_task("shapes", None, 3)

    def picky(sample, completion):
        if sample.id == task.samples[1].id:
            raise KeyError("no such column")
        return 1.0

    task.pack = dataclasses.replace(task.pack, metrics={**task.pack.metrics, "picky": picky})
    records = []
    for i, sample in enumerate(task.samples):
        prompt = PromptInputs(sample, torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))
        records.append(score_record(task, i, prompt, Completion(torch.tensor([1]), sample.answer, False)))
    assert [r["scores"]["picky"] for r in records] == [1.0, None, 1.0]
    assert "KeyError" in records[1]["metric_errors"]["picky"] and "metric_errors" not in records[0]
    assert records[1]["scores"]["accuracy"] == 1.0  # the other metrics of that doc still count
    out = task_results(task, records)
    assert out["picky_n,none"] == 2 and out["n_metric_failed"] == 1
