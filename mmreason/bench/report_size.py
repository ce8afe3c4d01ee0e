"""`mmreason bench report`: `mmreason report` of a synthetic long run, and the alarm check's cost per step.

Writes a run directory of ``--steps`` metric rows shaped like the main job's (about 50 keys, 1.4 kB a row, the
``alarm/*`` metrics, a held-out eval every 10 steps, ``reward_hacking`` held over one stretch), a
``completions.jsonl`` of ``--rows-per-step`` rows every ``--completion-every`` steps and an ``events.log``,
then runs ``mmreason report`` on it in a child process and prints its wall and CPU time, peak RSS (the child's
``VmHWM``) and the HTML's size. Then ``HealthMonitor.check`` after ``--check-rows`` rows: the median of
200 calls.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmreason.health.config import HealthConfig
from mmreason.health.monitor import HealthMonitor

ROW = (
    '{{"step": {s}, "time/video_decode": 8.98e-06, "update/shared_prefix": 1.0, "loss": {loss}, '
    '"policy_loss": {loss}, "ratio_mean": 1.0, "clip/low": 0.0, "clip/high": 0.0, "clip/region": 0.0, '
    '"entropy": {ent}, "grad_norm": 0.7421875, "reward/mean": {r}, "reward/std": 0.3964410722255707, '
    '"rewards/vqa_exact/mean": {r}, "rewards/vqa_exact/std": 0.3964410722255707, "reward_missing/vqa_exact": 0.0, '
    '"reward/shapes/mean": {r}, "completion/shapes/length_mean": 3.1953125, "frac_reward_zero_std": 0.0625, '
    '"completion/length_mean": 3.1953125, "completion/length_max": 6.0, "completion/clipped_ratio": 0.0546875, '
    '"advantage/abs_mean": 0.735167384147644, "answers/top_share": 0.1875, "answers/gold_top_share": 0.375, '
    '"answers/golds": 4.0, "answers/top": "yellow", "time/prompts": 0.042359368000006725, '
    '"time/generate": 0.09277287000008982, "time/reward": 0.005881622999822866, '
    '"time/advantages": 0.0015071080001689552, "time/update": 0.523463220000167, "time/step": 0.6731362290001925, '
    '"time/other": 0.0071520399999371875, "lr": 0.001, "count/bad_samples": 0, "count/filtered_prompts": 0, '
    '"count/nan_steps": 0, "count/reward_errors": 0, "count/dropped_groups": 0, "count/env_faults": 0, '
    '"count/unseen_media": 0, "alarm/reward_hacking": {hack}, "alarm/answer_collapse": 0.0, '
    '"alarm/entropy_collapse": 0.0, "alarm/kl_blowup": 0.0, "alarm/no_signal": 0.0, "alarm/truncated": 0.0, '
    '"alarm/logprob_mismatch": 0.0{extra}}}\n'
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--completion-every", type=int, default=100)
    parser.add_argument("--rows-per-step", type=int, default=16)
    parser.add_argument("--check-rows", type=int, default=50_000)
    parser.add_argument("--dir", default=None, help="where the run is written (default: a temporary folder)")


def write_run(run: Path, steps: int, completion_every: int, rows_per_step: int) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with (run / "metrics.jsonl").open("w") as f:
        for s in range(1, steps + 1):
            extra = f', "eval/shapes/accuracy": {0.5 + 0.4 * s / steps:.4f}' if s % 10 == 0 else ""
            f.write(
                ROW.format(
                    s=s,
                    loss=-0.01 * (s % 7),
                    ent=1.9 - s / (2 * steps),
                    r=0.2 + 0.6 * s / steps,
                    hack=1.0 if steps // 2 <= s < steps // 2 + 500 else 0.0,
                    extra=extra,
                )
            )
    with (run / "completions.jsonl").open("w") as f:
        for s in range(completion_every, steps + 1, completion_every):
            for i in range(rows_per_step):
                f.write(
                    json.dumps(
                        {
                            "step": s,
                            "sample_id": f"shapes-{i // 8}",
                            "group": i // 8,
                            "prompt": "What colour is the shape? Answer with one word.",
                            "answer": "red",
                            "completion": "red " * 20,
                            "reward": 1.0,
                            "advantage": 0.3,
                            "rewards": {"vqa_exact": 1.0},
                            "media": [],
                            "truncated": False,
                        }
                    )
                    + "\n"
                )
    with (run / "events.log").open("w") as f:
        f.write(
            json.dumps(
                {
                    "event": "alarm",
                    "alarm": "reward_hacking",
                    "step": steps // 2,
                    "reason": "reward/mean rose +0.05 over 30 steps",
                }
            )
            + "\n"
        )


# the child's own peak RSS: VmHWM starts anew at exec (ru_maxrss would count this process's, torch and all)
CHILD = (
    "import sys; from mmreason.cli import main; rc = main(['report', sys.argv[1]]); "
    "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]); sys.exit(rc)"
)


def report(run: Path) -> tuple[float, float, float, float]:
    """(wall s, CPU s, peak RSS MB, HTML MB) of `mmreason report RUN` in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(run)], check=True, capture_output=True, text=True).stdout
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    rss = int(out.split()[-1]) / 1024
    return seconds, cpu, rss, (run / "report.html").stat().st_size / 2**20


def check_cost(rows: int) -> float:
    """Median ms of ``HealthMonitor.check`` after ``rows`` rows (no alarm holds)."""

    history = [json.loads(ROW.format(s=s, loss=0.0, ent=1.0, r=0.5, hack=0.0, extra="")) for s in range(1, rows + 1)]
    monitor = HealthMonitor(HealthConfig(), lambda *a, **k: None, say=lambda _: None, rows=history)
    times = []
    for s in range(rows + 1, rows + 201):
        row = {k: v for k, v in history[-1].items() if k != "step"}
        start = time.perf_counter()
        monitor.check(s, row)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.dir or tmp) / "run"
        start = time.perf_counter()
        write_run(path, args.steps, args.completion_every, args.rows_per_step)
        size = sum(f.stat().st_size for f in path.iterdir()) / 2**20
        print(f"wrote {path} ({args.steps} steps, {size:.0f} MB) in {time.perf_counter() - start:.0f} s")
        seconds, cpu, rss, html = report(path)
        print(
            f"mmreason report: {seconds:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.0f} MB, report.html {html:.2f} MB"
        )
    print(f"HealthMonitor.check after {args.check_rows} rows: {check_cost(args.check_rows):.3f} ms (median of 200)")
    return 0
