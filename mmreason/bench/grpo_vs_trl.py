"""`mmreason bench grpo-vs-trl`: mmreason's GRPO step against TRL's ``GRPOTrainer`` on the same work.

Both sides, in one process and at the same torch thread count, train the same checkpoint on the same
prompts (``--pages P`` images of ``--page-px X`` pixels each, a document-like prompt; ``--pages 1`` is one
image), with the same G, completion length, loss type, beta, learning rate, optimizer (AdamW, betas 0.9 /
0.99, constant rate, clip 1.0), temperature 1, no top-p / top-k, the same suppressed vision specials, fp32
(or, with ``--dtype bfloat16``, each side's bf16 training: mmreason's bf16 weights with fp32 master weights,
TRL's ``bf16=True``, i.e. fp32 weights under bf16 autocast), sdpa attention, no gradient checkpointing, and the same reward function (a cheap length score, so the
timing is the trainer's). One optimizer step per batch of rollouts and one pass over it on both sides (so
neither takes old-policy log-probs). TRL's logging, completion logging, checkpoints and progress bar are
off. Each side's step time is the wall time between two finished optimizer steps; the first ``--warmup``
steps are not counted. Figures, not assertions: a shared machine is noisy, so run it more than once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mmreason.config import load_config
from mmreason.models.tiny import build_tiny_model
from mmreason.rollout.generate import suppressed_token_ids
from mmreason.taskpack import TASKS
from mmreason.train.config import TrainConfig
from mmreason.train.prompts import load_prompt
from mmreason.train.setup import setup_run
from mmreason.train.step import train_step

if TYPE_CHECKING:
    from trl import GRPOTrainer

QUESTION = "Which page shows the answer? Reply with the page number."
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SETTINGS = (
    "Same on both sides: checkpoint, prompts (prompt tokens in the table), G, C, loss, beta, learning rate, "
    "AdamW (0.9, 0.99, no decay, constant rate, clip 1.0), scale_rewards group, epsilon 0.2, temperature 1, "
    "no top-p/top-k, vision specials suppressed, the dtype above, sdpa, no gradient checkpointing, one optimizer step "
    "and one pass per batch of rollouts, the same length reward. Off on TRL: logging, completion logging, "
    "checkpoints, gradient checkpointing, progress bar. Off on mmreason: completion logging, "
    "checkpoints."
)


def length_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A cheap reward that varies within a group (TRL's calling convention; both trainers call it)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [(len(t) % 7) / 6 for t in texts]


def write_prompts(folder: Path, pages: int, page_px: int, count: int, seed: int = 0) -> Path:
    """``count`` rows of ``pages`` seeded noise images each, as a vision-pack JSONL; returns its path."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        paths = []
        for p in range(pages):
            path = folder / f"doc{i}_page{p}.png"
            Image.fromarray(rng.integers(0, 256, (page_px, page_px, 3), dtype=np.uint8)).save(path)
            paths.append(path.name)
        rows.append({"id": f"doc{i}", "images": paths, "question": QUESTION, "answer": "1", "answer_type": "free-form"})
    jsonl = folder / "prompts.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return jsonl


def run_mmreason(model_dir: str, jsonl: Path, out: Path, o: argparse.Namespace) -> dict:
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.name_or_path={model_dir}",
            f"model.dtype={o.dtype}",
            "model.attn_implementation=sdpa",
            "data.task=vision",
            f"data.train_path={jsonl}",
            f"rollout.num_generations={o.num_generations}",
            f"rollout.max_completion_length={o.completion_len}",
            f"prompts_per_step={o.prompts}",
            f"mini_batch_size={o.prompts * o.num_generations}",
            f"learning_rate={o.learning_rate}",
            f"algorithm.loss_type={o.loss_type}",
            f"algorithm.beta={o.beta}",
            f"shared_prefix={not o.no_shared_prefix}",
            f"output_dir={out}",
            f"max_steps={o.steps + o.warmup}",
            "log_completions_steps=0",
            "save_steps=0",
            f"num_threads={o.threads}",
            "rewards=[{name: 'mmreason.bench.grpo_vs_trl:length_reward', isolation: thread}]",
        ],
    )
    run = setup_run(cfg, verbose=False)
    prompt = load_prompt(run, 0)
    if prompt is None:
        raise ValueError(f"bench grpo-vs-trl: the first sample of {o.task!r} does not build a prompt")
    prompt_tokens = prompt.length
    rows, ends, cpu = [], [time.perf_counter()], [time.process_time()]
    for step in range(1, o.steps + o.warmup + 1):
        run.step = step
        rows.append(train_step(run, step))
        ends.append(time.perf_counter())
        cpu.append(time.process_time())
    rows, steps = rows[o.warmup :], _diffs(ends)[o.warmup :]
    generate = [r["time/generate"] for r in rows]
    update = [r["time/update"] for r in rows]
    lengths = [r["completion/length_mean"] for r in rows]
    return _summary(steps, generate, update, _diffs(cpu)[o.warmup :]) | {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": statistics.mean(lengths),
    }


def run_trl(model_dir: str, jsonl: Path, out: Path, o: argparse.Namespace) -> dict:
    from datasets import Dataset
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor, PrinterCallback, TrainerCallback
    from trl import GRPOConfig

    samples = TASKS.get("vision").load(str(jsonl), "train")  # the samples mmreason trains on, as TRL rows
    data = Dataset.from_list(
        [{"prompt": s.messages, "images": [Image.open(p).convert("RGB") for p in s.images]} for s in samples]
    )
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    n = o.prompts * o.num_generations
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=n,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=o.num_generations,
        max_completion_length=o.completion_len,
        learning_rate=o.learning_rate,
        loss_type=o.loss_type,
        beta=o.beta,
        scale_rewards="group",
        epsilon=0.2,
        num_iterations=1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generation_kwargs={"suppress_tokens": suppressed_token_ids(processor.tokenizer)},
        max_steps=o.steps + o.warmup,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        max_grad_norm=1.0,
        optim="adamw_torch",
        bf16=o.dtype == "bfloat16",
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        report_to="none",
        logging_steps=10**9,
        save_strategy="no",
        log_completions=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    clock = _TrlClock()
    trainer = _timed_trainer(clock)(
        model=model, reward_funcs=[length_reward], args=args, train_dataset=data, processing_class=processor
    )

    class Ends(TrainerCallback):
        def on_step_end(self, *_args: Any, **_kwargs: Any) -> None:
            clock.step_end()

    trainer.add_callback(Ends())
    trainer.remove_callback(PrinterCallback)  # no end-of-run log line
    clock.step_end()
    trainer.train()
    w = o.warmup
    steps = _diffs(clock.ends)[w:]
    return _summary(steps, clock.generate[w:], clock.update[w:], _diffs(clock.cpu)[w:]) | {
        "prompt_tokens": clock.prompt_tokens,
        "completion_tokens": statistics.mean(clock.lengths[w:]),
    }


class _TrlClock:
    """Per optimizer step: TRL's ``generate`` time, and its update (the step minus generation and scoring,
    plus any reference / old-policy log-prob pass made while scoring)."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.cpu: list[float] = []
        self.generate: list[float] = []
        self.update: list[float] = []
        self._gen = self._score = self._logps = 0.0
        self.prompt_tokens = 0
        self.lengths: list[float] = []  # mean completion tokens per step

    def step_end(self) -> None:
        now = time.perf_counter()
        if self.ends:
            self.generate.append(self._gen)
            self.update.append(now - self.ends[-1] - self._score + self._logps)
        self.ends.append(now)
        self.cpu.append(time.process_time())
        self._gen = self._score = self._logps = 0.0


def _timed_trainer(clock: _TrlClock) -> type[GRPOTrainer]:
    """TRL's GRPOTrainer with its generation, scoring and log-prob passes timed into ``clock``."""
    from trl import GRPOTrainer

    class Timed(GRPOTrainer):
        _scoring = False

        def _generate_single_turn(self, prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
            clock.prompt_tokens = len(prompt_ids[0])
            t = time.perf_counter()
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            clock._gen += time.perf_counter() - t
            clock.lengths.append(statistics.mean(len(c) for c in completion_ids))
            return completion_ids, logprobs

        def _generate_and_score_completions(self, *args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            self._scoring = True
            try:
                return super()._generate_and_score_completions(*args, **kwargs)
            finally:
                self._scoring = False
                clock._score += time.perf_counter() - t

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            finally:
                if self._scoring:
                    clock._logps += time.perf_counter() - t

    return Timed


def _diffs(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def _summary(steps: list[float], generate: list[float], update: list[float], cpu: list[float]) -> dict:
    """Medians of wall seconds per step and its split, and of the process's CPU seconds per step (less
    sensitive than wall time to other jobs on a shared machine when threads are few)."""
    step, gen, upd = (statistics.median(x) for x in (steps, generate, update))
    return {
        "step": step,
        "generate": gen,
        "update": upd,
        "other": step - gen - upd,
        "steps": steps,
        "cpu": statistics.median(cpu),
    }


def bench_grpo_vs_trl(o: argparse.Namespace) -> dict:
    import warnings

    import datasets
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning)  # TRL's use of renamed transformers options
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    torch.set_num_threads(o.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = o.model or str(build_tiny_model(root / "model", seed=0))
        (root / "data").mkdir()
        jsonl = write_prompts(root / "data", o.pages, o.page_px, max(o.prompts, 2))
        torch.manual_seed(0)
        ours = run_mmreason(model_dir, jsonl, root / "mmreason", o)
        torch.set_num_threads(o.threads)
        torch.manual_seed(0)
        theirs = run_trl(model_dir, jsonl, root / "trl", o)
    return {
        "mmreason": ours,
        "trl": theirs,
        "ratio": ours["step"] / theirs["step"],
        "cpu_ratio": ours["cpu"] / theirs["cpu"],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    import trl  # noqa: F401  (the bench needs the dev extra; mmreason.bench lists it as missing without)

    parser.add_argument("--model", help="checkpoint directory (default: a fresh `mmreason tiny-model`)")
    parser.add_argument("--pages", type=int, default=8, help="images per prompt (P)")
    parser.add_argument("--page-px", type=int, default=224, help="side of each square image in pixels (X)")
    parser.add_argument("--prompts", type=int, default=1, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=8, help="G")
    parser.add_argument("--completion-len", type=int, default=64, help="C, max completion tokens")
    parser.add_argument("--loss-type", choices=LOSS_TYPES, default="dapo")
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--no-shared-prefix", action="store_true", help="mmreason: the plain padded update")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="bfloat16: mmreason model.dtype=bfloat16 (fp32 master weights), TRL bf16=True (autocast)",
    )
    parser.add_argument("--json", help="also write the figures to this file")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    r = bench_grpo_vs_trl(args)
    table = Table(
        title=f"GRPO step: mmreason vs TRL GRPOTrainer (ratio mmreason/TRL {r['ratio']:.2f}x)",
        caption=f"median of {args.steps} steps after {args.warmup} warm-up; {args.prompts} prompt(s) x "
        f"{args.pages} image(s) of {args.page_px} px, G={args.num_generations}, "
        f"C={args.completion_len}, loss {args.loss_type}, beta {args.beta}, "
        f"{args.threads} thread(s), {args.dtype}"
        + ("; mmreason without the shared prefix" if args.no_shared_prefix else ""),
    )
    for col in (
        "side",
        "step s",
        "generation s",
        "update s",
        "other s",
        "step CPU s",
        "prompt tokens",
        "completion tokens",
    ):
        table.add_column(col)
    for side in ("mmreason", "trl"):
        s = r[side]
        table.add_row(
            side,
            f"{s['step']:.3f}",
            f"{s['generate']:.3f}",
            f"{s['update']:.3f}",
            f"{s['other']:.3f}",
            f"{s['cpu']:.3f}",
            str(s["prompt_tokens"]),
            f"{s['completion_tokens']:.1f}",
        )
    table.add_row(
        "ratio",
        *(
            f"{r['mmreason'][k] / r['trl'][k]:.2f}x" if r["trl"][k] > 0 else "-"
            for k in ("step", "generate", "update", "other", "cpu")
        ),
        "",
        "",
    )
    console = Console(width=120)
    console.print(table)
    console.print(SETTINGS, f"CPU-time ratio {r['cpu_ratio']:.2f}x.", soft_wrap=False)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0
