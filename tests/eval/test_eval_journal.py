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
