"""MedScope data tools: generate minutes-long procedure videos with short events at known times, or turn the
real echocardiography cine of pydicom-data into a video with measured questions.

    mmreason data medscope --out DIR --videos N --minutes MIN..MAX [--seed S] [--size PX] [--event-scale K]
    mmreason data medscope --echo --out DIR"""

from __future__ import annotations

import argparse

from mmreason.tasks.medscope.echo import echo_rows
from mmreason.tasks.medscope.synth import QUESTIONS_PER_VIDEO, generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder (videos + data.jsonl)")
    parser.add_argument("--videos", type=int, default=16, help="videos to generate (3 questions each)")
    parser.add_argument("--minutes", default="2..5", help="video length in minutes, MIN..MAX (decimals allowed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=64, help="frame side in pixels (a multiple of 16)")
    parser.add_argument(
        "--event-scale",
        type=int,
        default=1,
        help="the corner marker's side and the instrument's width times this (1..4)",
    )
    parser.add_argument("--echo", action="store_true", help="write the pydicom-data echocardiography rows instead")


def minutes_range(text: str) -> tuple[int, int]:
    """'2..5' -> (120, 300) seconds."""
    lo, _, hi = text.partition("..")
    try:
        return round(float(lo) * 60), round(float(hi or lo) * 60)
    except ValueError:
        raise SystemExit(f"mmreason data medscope: --minutes {text!r} is not MIN..MAX in minutes") from None


def run(args: argparse.Namespace) -> int:
    if args.echo:
        try:
            path = echo_rows(args.out)
        except (ImportError, ValueError) as err:
            raise SystemExit(f"mmreason data medscope --echo: {err}") from None
        print(f"wrote {path}")
        return 0

    if args.videos < 1:
        raise SystemExit("mmreason data medscope: --videos must be at least 1")
    try:
        path = generate(
            args.out, args.videos, args.seed, minutes_range(args.minutes), args.size, scale=args.event_scale
        )
    except ValueError as err:
        raise SystemExit(f"mmreason data medscope: {err}") from None
    print(f"wrote {args.videos} videos, {QUESTIONS_PER_VIDEO * args.videos} questions: {path}")
    return 0
