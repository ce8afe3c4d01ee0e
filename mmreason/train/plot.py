"""`mmreason plot RUN_DIR`: PNG training curves from a run's metrics.jsonl; `mmreason plot RUN_A RUN_B ...`: the
runs' curves side by side, one line per run in each panel (e.g. Reg-GRPO beside GRPO on the same data)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mmreason.train.logging import read_metrics

DEFAULT_KEYS = ("reward/mean", "loss", "kl", "entropy", "completion/length_mean", "time/step")


def plot_run(run_dir: str | Path, keys: tuple[str, ...] | None = None, out: str | Path | None = None) -> Path:
    # heavy (a GUI toolkit's fonts and backends): loaded only to draw
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    present = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and k != "step"})
    wanted = [k for k in (keys or DEFAULT_KEYS) if k in present]
    # Every reward component and per-task reward (rewards/<name>/mean, reward/<task>/mean).
    wanted += [k for k in present if k.startswith(("rewards/", "reward/")) and k.endswith("/mean") and k not in wanted]
    wanted = wanted[:12] or present[:12]
    # Held-out scores of the in-training eval (eval/<task>/<metric>) go in the reward panel, beside the
    # training reward they should confirm (or in a panel of their own when there is no reward).
    held_out = [k for k in present if k.startswith("eval/") and not k.endswith("/n_failed")]
    if held_out and "reward/mean" not in wanted:
        wanted = ["reward/mean", *wanted][:12]
    cols = min(3, len(wanted))
    rows_n = -(-len(wanted) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.0 * rows_n), squeeze=False)
    for ax, key in zip(axes.flat, wanted):
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.5, label=f"{key} (train)")
        if key == "reward/mean" and held_out:
            for name in held_out:
                pts = [(r["step"], r[name]) for r in rows if isinstance(r.get(name), (int, float))]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", lw=1.5, ms=4, label=f"{name} (held out)")
            ax.legend(fontsize=7, loc="best")
            key = "reward (train) and held-out eval"
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(wanted) :]:
        ax.axis("off")
    fig.suptitle(Path(run_dir).name)
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


Series = dict[str, dict[str, list[tuple[int, float]]]]  # metric -> run name -> [(step, value)]


def comparison_series(run_dirs: list[str | Path], keys: tuple[str, ...] | None = None) -> Series:
    """Collect the curves of several runs: each wanted metric that any run logged, per run (named by its folder; a
    repeated folder name gets its parent's in front)."""
    names = [Path(d).name for d in run_dirs]
    names = [f"{Path(d).parent.name}/{n}" if names.count(n) > 1 else n for d, n in zip(run_dirs, names)]
    runs = {name: read_metrics(d) for name, d in zip(names, run_dirs)}
    present = {k for rows in runs.values() for r in rows for k, v in r.items() if isinstance(v, (int, float))}
    wanted = [k for k in (keys or DEFAULT_KEYS) if k in present]
    wanted += sorted(
        k
        for k in present
        if k.startswith(("rewards/", "eval/")) and k not in wanted and not k.endswith(("/std", "/n_failed"))
    )
    return {
        key: {
            name: [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
            for name, rows in runs.items()
        }
        for key in wanted[:12]
    }


def plot_runs(run_dirs: list[str | Path], keys: tuple[str, ...] | None = None, out: str | Path | None = None) -> Path:
    """Draw one PNG with every run's curve in each panel; default path: the first run's compare.png."""
    # heavy (a GUI toolkit's fonts and backends): loaded only to draw
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = comparison_series(run_dirs, keys)
    cols = min(3, max(1, len(series)))
    rows_n = max(1, -(-len(series) // cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.0 * rows_n), squeeze=False)
    for ax, (key, per_run) in zip(axes.flat, series.items()):
        for name, points in per_run.items():
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.5, label=name)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(series) :]:
        ax.axis("off")
    fig.tight_layout()
    path = Path(out) if out else Path(run_dirs[0]) / "compare.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        nargs="+",
        help="one or more directories written by `mmreason train` or "
        "`mmreason sft`; with several, their curves share each panel",
    )
    parser.add_argument("--keys", nargs="*", help="metrics to plot (default: reward, loss, KL, ...)")
    parser.add_argument("--out", help="PNG path (default: RUN_DIR/curves.png; several runs: the first's compare.png)")


def run(args: argparse.Namespace) -> int:
    keys = tuple(args.keys) if args.keys else None
    if len(args.run_dir) == 1:
        path = plot_run(args.run_dir[0], keys, args.out)
    else:
        path = plot_runs(args.run_dir, keys, args.out)
    print(f"wrote {path}")
    return 0
