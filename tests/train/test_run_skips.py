"""Hostile rows inside a run (GRPO, SFT, eval): any one row's failure is a counted skip said on the console, whatever
its exception; a run with no usable sample stops with one line instead of training on nothing and exiting 0; a
prompt template naming an undefined variable is refused before any row is read.

Before: an image stored as ``{"bytes": "<base64 text>"}`` or as a number ended GRPO, SFT and eval mid-step with a
``TypeError`` traceback (nothing saved); skips went only to ``events.log``; a run whose every row was a skip
exited 0; a template naming ``{{ question }}`` made every row a skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.tasks.generic.data import generic_load
from mmreason.tasks.shapes.synth import generate

ROOT = Path(__file__).resolve().parents[2]


def _data(tmp_path: Path, broken: dict[int, object]) -> tuple[Path, list[dict]]:
    """4 shapes rows, row k's image replaced by ``broken[k]``."""
    rows = [json.loads(x) for x in generate(tmp_path / "shapes", 4, seed=1).read_text().splitlines()]
    for k, image in broken.items():
        rows[k]["image"] = image
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


def _run(command: str, config: str, model: Path, data: Path, out: Path, *extra: str) -> int:
    return main(
        [
            command,
            str(ROOT / "configs" / config),
            f"model.name_or_path={model}",
            f"data.train_path={data}",
            f"output_dir={out}",
            "max_steps=1",
            "prompts_per_step=4",
            "rollout.num_generations=2",
            "rollout.max_completion_length=2",
            "eval_steps=0",
            "save_steps=0",
            "num_threads=1",
            *extra,
        ]
    )


BROKEN = {0: {"bytes": "aGVsbG8="}, 2: 5}  # base64 text where bytes belong; a number where a path belongs


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("command,config", [("train", "quickstart.yaml"), ("sft", "shapes/quickstart_sft.yaml")])
def test_rows_that_fail_with_any_exception_are_counted_skips_said_on_the_console(
    command, config, tiny_model_dir, shapes_cache, tmp_path, capsys
):
    data, rows = _data(tmp_path, BROKEN)
    out = tmp_path / "run"
    assert _run(command, config, tiny_model_dir, data, out) == 0
    assert _metrics(out)[0]["count/bad_samples"] == 2
    said = capsys.readouterr()
    console = said.out + said.err
    assert f"skipped sample {rows[0]['id']!r} (bad sample, max_bad_samples=20 #" in console
    assert "the image dict's 'bytes' is text (a str), not bytes" in console
    assert f"skipped sample {rows[2]['id']!r}" in console and "TypeError: cannot load an image from int" in console
    assert (out / "checkpoint-1" / "trainer_state.json").exists()


def test_eval_fails_such_docs_alone_and_scores_the_rest(tiny_model_dir, tmp_path):
    data, _ = _data(tmp_path, BROKEN)
    results = tmp_path / "results"
    argv = ["eval", "--model", str(tiny_model_dir), "--tasks", f"shapes:{data}", "--output_path", str(results)]
    assert main([*argv, "--gen_kwargs", "max_new_tokens=2"]) == 0
    report = json.loads(next(results.rglob("*_results.json")).read_text())
    scores = report["results"]["shapes:data"]
    assert scores["n"] == 2 and scores["n_failed"] == 2  # the two good docs scored, the two broken failed alone


def test_a_step_with_no_usable_sample_stops_the_run_with_one_line(tiny_model_dir, shapes_cache, tmp_path, capsys):
    data, _ = _data(tmp_path, {k: f"gone-{k}.png" for k in range(4)})  # every picture missing: every row a skip
    out = tmp_path / "run"
    assert _run("train", "quickstart.yaml", tiny_model_dir, data, out, "max_bad_samples=100") == 2
    said = capsys.readouterr()
    assert (
        "run stopped at step 1: no usable sample: every prompt drawn for step 1 was skipped (so far 4 broken"
        in said.err
    )
    assert said.out.count("file does not exist") == 4  # the skips themselves, on the console
    assert not (out / "checkpoint-1").exists()  # nothing trained: nothing saved as if it had


def test_a_template_naming_an_undefined_variable_is_refused_before_any_row(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"problem": "2 + 2?", "answer": "4"}) + "\n")
    template = tmp_path / "mine.jinja"
    template.write_text("Question: {{ question }}")
    with pytest.raises(ValueError, match=r"'question' is undefined \(a template sees only 'content'\)"):
        generic_load(str(data), prompt_template=str(template))
