"""Golden prompts: the rendered prompt of every registered task is frozen, so an unintended change fails.

Each task's first two eval docs are rendered through the tiny model's chat template and the real
prompt builder; the text and token counts must equal ``golden/<task>.txt``. After an intended change,
rewrite the files with ``MMREASON_UPDATE_GOLDEN=1 pytest tests/eval/test_golden.py`` and review
the diff. A new task pack needs its golden file before this test passes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mmreason.eval.tasks import EvalTask, load_task
from mmreason.rollout.prompts import build_prompt
from mmreason.taskpack import TASKS

GOLDEN = Path(__file__).with_name("golden")
# packs with no data of their own: their golden docs (generic: two EasyR1 rows, scikit-image photographs inline)
DATA = {"generic": GOLDEN / "generic.jsonl"}


def snapshot(task: EvalTask, processor) -> str:
    lines = [
        f"task: {task.name}",
        f"prompt_template: {task.pack.prompt_template!r}",
        f"metrics: {', '.join(task.pack.metrics)}",
    ]
    for sample in task.samples:
        prompt = build_prompt(processor, sample, max_prompt_length=32768)
        lines += [
            f"--- doc {sample.id} | answer {sample.answer!r} | prompt_tokens {prompt.length}"
            f" | visual_tokens {prompt.visual_tokens}",
            prompt.text,
        ]
    return "\n".join(lines) + "\n"


def _check(name: str, text: str, update: bool = os.environ.get("MMREASON_UPDATE_GOLDEN") == "1") -> None:
    path = GOLDEN / f"{name}.txt"
    if update:
        path.write_text(text)
    if not path.exists():
        pytest.fail(
            f"no golden prompt for task {name!r}: run MMREASON_UPDATE_GOLDEN=1 pytest {__file__} "
            "and commit tests/eval/golden/"
        )
    assert text == path.read_text(), f"the rendered prompt of task {name!r} changed (see {path})"


def _published_files():
    """tests/tasks/published/published_files.py: small files in the published benchmarks' layouts."""
    import importlib.util

    path = Path(__file__).parents[1] / "tasks" / "published" / "published_files.py"
    spec = importlib.util.spec_from_file_location("published_files", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Packs with no built-in data (they read a benchmark's files): their prompts are rendered on small files in the
# benchmark's layout, written by tests/tasks/published/published_files.py.
BENCHMARK_FILES = {
    "mathvista": "mathvista_repo",
    "mmmu": "mmmu_folder",
    "chartqa": "chartqa_repo",
    "docvqa": "docvqa_json",
    "videomme": "videomme_set",
}


@pytest.mark.parametrize("name", TASKS.names())
def test_golden_prompt(name, tiny, shapes_cache, tmp_path):
    path = str(DATA[name]) if name in DATA else None
    if name in BENCHMARK_FILES:
        path = str(getattr(_published_files(), BENCHMARK_FILES[name])(tmp_path / name))
    _check(name, snapshot(load_task(name, path, limit=2), tiny[1]))


def test_a_changed_prompt_is_caught(tiny, shapes_cache):
    task = load_task("shapes", None, limit=2)
    content = task.samples[0].messages[0]["content"]
    content[-1] = {**content[-1], "text": content[-1]["text"] + " Think first."}
    with pytest.raises(AssertionError, match="changed"):
        _check("shapes", snapshot(task, tiny[1]), update=False)
