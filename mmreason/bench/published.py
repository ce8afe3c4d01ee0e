"""`mmreason bench published`: the published-benchmark packs' costs outside the model.

1. **Re-scoring** (``mmreason eval score``): for each of ``mathvista``, ``mmmu``, ``chartqa``, ``docvqa`` and
   ``videomme`` a file of ``--n`` rows (10,000) in the benchmark's published layout and a predictions file of as
   many free-text answers (a third right, a third wrong, a third unparsable, ~150 characters each) are written,
   then ``rescore`` runs whole: read the rows, read the answers, score every metric and breakdown, write the
   results and samples files. The fastest of ``--repeats`` counts. No media is read (re-scoring needs none).
2. **Harness overhead of a model run** (``--overhead``): ``mmreason eval`` on the tiny model (or ``--model``)
   over ``--overhead_n`` docs of each benchmark with generated images (224 px) / clips (16 frames, 112 px), after
   one warm-up run; the time inside the batched ``generate`` calls and in model loading is measured by wrapping
   the harness's ``generate_batch`` / ``load_for_eval``; harness = wall - loading - generate, reported per doc
   and as a share of generate (media decoding a prefetch thread hides behind generation is not counted).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mmreason.eval.harness as harness
import mmreason.eval.scoring as scoring
from mmreason.eval.config import EvalConfig, GenKwargs, ModelArgs
from mmreason.eval.rescore import rescore
from mmreason.media.video_write import write_mp4
from mmreason.models.tiny import build_tiny_model

BENCHMARKS = ("mathvista", "mmmu", "chartqa", "docvqa", "videomme")
FILLER = "Looking at the figure carefully and reading every label, we work it out step by step. "


def _answer(kind: int, right: str, wrong: str) -> str:
    return FILLER + (
        f"The answer is {right}."
        if kind == 0
        else f"The answer is {wrong}."
        if kind == 1
        else "I cannot tell from this picture."
    )


def _mathvista(n: int, rng: random.Random) -> tuple[Any, dict[str, str], str]:
    rows, preds = {}, {}
    for k in range(n):
        pid, kind = str(k + 1), k % 3
        meta = {
            "category": rng.choice(["math-targeted-vqa", "general-vqa"]),
            "task": f"task {k % 5}",
            "context": f"context {k % 12}",
            "grade": f"grade {k % 4}",
            "source": f"source {k % 31}",
            "language": "english",
            "skills": [f"skill {k % 7}", f"skill {(k + 3) % 7}"],
        }
        if k % 2:
            row = {
                "question_type": "multi_choice",
                "answer_type": "text",
                "choices": ["red", "green", "blue", "tan"],
                "answer": "green",
                "precision": None,
            }
            preds[pid] = _answer(kind, "(B) green", "(D) tan")
        else:
            row = {
                "question_type": "free_form",
                "answer_type": "integer",
                "choices": None,
                "answer": str(k),
                "precision": None,
            }
            preds[pid] = _answer(kind, str(k), str(k + 1))
        rows[pid] = {
            "pid": pid,
            "question": f"Question {k}?",
            "image": f"images/{pid}.jpg",
            "unit": None,
            "metadata": meta,
            **row,
        }
    return rows, preds, "testmini.json"


def _mmmu(n: int, rng: random.Random) -> tuple[Any, dict[str, str], str]:
    rows, preds = [], {}
    subjects = ["Art", "Math", "Physics", "History", "Accounting"]
    for k in range(n):
        rid, kind = f"validation_{subjects[k % 5]}_{k}", k % 3
        base = {
            "id": rid,
            "question": f"Look at <image 1>. Question {k}?",
            "explanation": "",
            "image_1": f"img/{k}.png",
            "img_type": "['Diagrams']",
            "topic_difficulty": ["Easy", "Medium", "Hard"][k % 3],
            "subfield": f"field {k % 9}",
        }
        if k % 4:
            rows.append(
                {
                    **base,
                    "options": "['alpha', 'beta', 'gamma', 'delta']",
                    "answer": "C",
                    "question_type": "multiple-choice",
                }
            )
            preds[rid] = _answer(kind, "(C)", "(A)")
        else:
            rows.append({**base, "options": "[]", "answer": str(k * 0.5), "question_type": "open"})
            preds[rid] = _answer(kind, str(k * 0.5), str(k + 7))
    return rows, preds, "validation.jsonl"


def _chartqa(n: int, rng: random.Random) -> tuple[Any, dict[str, str], str]:
    rows, preds = [], {}
    for k in range(n):
        rows.append({"imgname": f"{k}.png", "query": f"What is the value of bar {k}?", "label": str(k + 10)})
        preds[f"human_{k}"] = "<answer>" + [str(k + 10), str(k + 100), "none"][k % 3] + "</answer>"
    return rows, preds, "test_human.json"


def _docvqa(n: int, rng: random.Random) -> tuple[Any, dict[str, str], str]:
    rows, preds = [], {}
    for k in range(n):
        rows.append(
            {
                "questionId": k,
                "question": f"What is field {k}?",
                "image": f"documents/{k % 50}.png",
                "question_types": [["layout"], ["form", "handwritten"], ["table/list"]][k % 3],
                "answers": [f"value number {k}", f"val {k}"],
            }
        )
        preds[str(k)] = [f"Value number {k}", f"valeu nmber {k}", "I cannot read it"][k % 3]  # short, as asked
    return {"data": rows}, preds, "val_v1.0.json"


def _videomme(n: int, rng: random.Random) -> tuple[Any, dict[str, str], str]:
    rows, preds = [], {}
    for k in range(n):
        qid = f"{k // 3:03d}-{k % 3 + 1}"
        rows.append(
            {
                "video_id": f"{k // 3:03d}",
                "duration": ["short", "medium", "long"][k % 3],
                "domain": f"domain {k % 6}",
                "sub_category": f"sub {k % 30}",
                "videoID": f"v{k // 3}",
                "question_id": qid,
                "task_type": f"type {k % 12}",
                "question": f"Question {k}?",
                "options": ["A. one", "B. two", "C. three", "D. four"],
                "answer": "B",
            }
        )
        preds[qid] = ["The best answer is B.", "C", "I am not sure what happens in this video at all"][k % 3]
    return rows, preds, "videomme.jsonl"


BUILDERS = {"mathvista": _mathvista, "mmmu": _mmmu, "chartqa": _chartqa, "docvqa": _docvqa, "videomme": _videomme}


def _write(path: Path, data: Any) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    else:
        path.write_text(json.dumps(data))


def bench_rescore(benchmark: str, n: int, repeats: int, root: Path) -> dict[str, Any]:
    data, preds, name = BUILDERS[benchmark](n, random.Random(0))
    folder = root / benchmark
    folder.mkdir(parents=True)
    _write(folder / name, data)
    _write(folder / "predictions.json", preds)
    times: list[float] = []
    results: dict[str, Any] = {}
    for r in range(repeats):
        start = time.perf_counter()
        results, _ = rescore(
            f"{benchmark}:{folder / name}", str(folder / "predictions.json"), output_path=str(folder / f"out{r}")
        )
        times.append(time.perf_counter() - start)
    task = next(iter(results["results"].values()))
    metric = next(iter(results["higher_is_better"][next(iter(results["results"]))]))
    return {
        "benchmark": benchmark,
        "n": n,
        "seconds": round(min(times), 3),
        "docs_per_s": round(n / min(times)),
        "metrics": len(results["higher_is_better"][next(iter(results["results"]))]),
        metric: round(task[f"{metric},none"], 4),
    }


# ---- harness overhead of a model run ----------------------------------------------------------------------


def _png(path: Path, k: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    Image.new("RGB", (224, 224), (k * 37 % 256, 90, 160)).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())


def _media_set(benchmark: str, n: int, folder: Path) -> Path:
    """``n`` docs of ``benchmark`` with their images (224 px) or clips (16 frames of 112 px) on disk."""
    import numpy as np

    data, _, name = BUILDERS[benchmark](n, random.Random(0))
    folder.mkdir(parents=True)
    if benchmark == "mathvista":
        for pid in data:
            _png(folder / "images" / f"{pid}.jpg", int(pid))
    elif benchmark == "mmmu":
        for k, row in enumerate(data):
            row["image_1"] = f"img/{k}.png"
            _png(folder / "img" / f"{k}.png", k)
    elif benchmark == "chartqa":
        for k in range(n):
            _png(folder / "png" / f"{k}.png", k)
    elif benchmark == "docvqa":
        for k in range(min(n, 50)):
            _png(folder / "documents" / f"{k}.png", k)
    else:
        for v in sorted({r["videoID"] for r in data}):
            write_mp4(folder / f"{v}.mp4", [np.full((112, 112, 3), 15 * i, np.uint8) for i in range(16)], fps=8)
    _write(folder / name, data)
    return folder / name


def _timed(module: Any, name: str, spent: dict[str, float]) -> Callable[..., Any]:
    """Wrap ``module.name`` so its calls add their seconds to ``spent[name]``; returns the original."""
    inner = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

    setattr(module, name, timed)
    return inner


def bench_overhead(
    benchmark: str, model_dir: str, n: int, batch_size: int, max_new_tokens: int, *, root: Path
) -> dict[str, Any]:
    """One ``mmreason eval`` of ``n`` docs; harness = wall - model loading - time inside ``generate_batch``."""
    from rich.console import Console

    data = _media_set(benchmark, n, root / f"media_{benchmark}")
    cfg = EvalConfig(
        model=model_dir,
        tasks=[f"{benchmark}:{data}"],
        batch_size=batch_size,
        output_path=str(root / f"run_{benchmark}"),
        log_samples=True,
        gen_kwargs=GenKwargs(max_new_tokens=max_new_tokens, temperature=0.0),
        model_args=ModelArgs(video_fps=2.0, video_max_frames=8),
    )
    spent: dict[str, float] = {}
    wrapped = [(scoring, "generate_batch"), (harness, "load_for_eval"), (harness, "_tokenizer")]
    originals = [_timed(module, name, spent) for module, name in wrapped]
    try:
        start = time.perf_counter()
        harness.evaluate(cfg, console=Console(file=io.StringIO()), progress=False)
        wall = time.perf_counter() - start
    finally:
        for (module, name), inner in zip(wrapped, originals):
            setattr(module, name, inner)
    generate = spent["generate_batch"]
    rest = wall - generate - spent.get("load_for_eval", 0.0) - spent.get("_tokenizer", 0.0)
    return {
        "benchmark": benchmark,
        "n": n,
        "generate_s": round(generate, 2),
        "harness_s": round(rest, 2),
        "harness_ms_per_doc": round(1000 * rest / n, 1),
        "overhead_pct": round(100 * rest / generate, 1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=10_000, help="rows and saved answers per benchmark")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    parser.add_argument("--overhead", action="store_true", help="also time a model run per benchmark")
    parser.add_argument("--model", default=None, help="for --overhead (default: build the tiny model)")
    parser.add_argument("--overhead_n", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_new_tokens", type=int, default=32)


def run(args: argparse.Namespace) -> int:
    import logging

    logging.getLogger("mmreason").setLevel(logging.ERROR)
    names = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in names:
            print(json.dumps(bench_rescore(name, args.n, args.repeats, root)), flush=True)
        if args.overhead:
            model_dir = args.model
            if model_dir is None:
                model_dir = str(build_tiny_model(root / "tiny", seed=0))
            bench_overhead(
                "chartqa", model_dir, args.batch_size, args.batch_size, 4, root=root / "warmup"
            )  # first calls
            for name in names:
                print(
                    json.dumps(
                        bench_overhead(
                            name, model_dir, args.overhead_n, args.batch_size, args.max_new_tokens, root=root
                        )
                    ),
                    flush=True,
                )
    return 0
