"""`mmreason reward NAME --completion TEXT [--column key=value ...]`: score one example, print JSON.

The quick way to try a reward while writing it::

    mmreason reward mcq --completion "The answer is (C)." --column answer=C --column 'choices=["a","b","c"]'
    {"mcq/accuracy": 1.0, "mcq/unparsed": 0.0}

Column and kwarg values are parsed as JSON when they parse (numbers, lists, dicts, true/false/null)
and kept as strings otherwise. NAME may be a registered name, ``pkg.module:function`` or
``path/to/file.py:function``. The completion length the length rewards see is ``--tokens``, or the
token count of ``--tokenizer DIR``, or else the number of whitespace-separated words.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import torch

from mmreason.files import MAX_TEXT_BYTES, read_text
from mmreason.rewarding.records import RewardSpec
from mmreason.rewarding.registry import list_rewards
from mmreason.rewarding.runner import RewardRunner
from mmreason.types import Sample, Trajectory, VideoRef


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: kept as the string
        return text


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} expects key=value, got {item!r}")
        out[key] = _value(value)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `mmreason reward` arguments."""
    parser.add_argument("name", help="registered reward name, pkg.module:function or path/file.py:function")
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--completion", help="the model output to score")
    text.add_argument("--completion-file", help="read the completion from this file ('-' for stdin)")
    parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dataset column (answer, evidence_pages, choices, span, ...); repeatable",
    )
    parser.add_argument(
        "--kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a reward kwarg, as in the config (threshold, beta, ...); repeatable",
    )
    parser.add_argument("--prompt", default="", help="the question (the user turn's text)")
    parser.add_argument("--image", action="append", default=[], help="an image file of the sample; repeatable")
    parser.add_argument("--video", help="a video file of the sample")
    parser.add_argument("--task", default="", help="the sample's task name (Sample.task)")
    parser.add_argument("--tokens", type=int, help="completion length in tokens, for the length rewards")
    parser.add_argument("--tokenizer", help="count completion tokens with this from_pretrained directory")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before the call is abandoned")


def _completion(args: argparse.Namespace) -> str:
    if args.completion is not None:
        return args.completion
    if args.completion_file == "-":
        return sys.stdin.read()
    return read_text(args.completion_file, "completion file", MAX_TEXT_BYTES)  # a regular file, bounded, UTF-8


def _length(args: argparse.Namespace, completion: str) -> int:
    if args.tokens is not None:
        return args.tokens
    if args.tokenizer:
        from transformers import AutoTokenizer

        return len(AutoTokenizer.from_pretrained(args.tokenizer).encode(completion, add_special_tokens=False))
    return len(completion.split())


def example(args: argparse.Namespace) -> tuple[Sample, Trajectory]:
    """The one (sample, trajectory) pair the arguments describe."""
    completion = _completion(args)
    columns = _pairs(args.column, "--column")
    content = [{"type": "image"} for _ in args.image] + ([{"type": "video"}] if args.video else [])
    content.append({"type": "text", "text": args.prompt})
    sample = Sample(
        id="cli",
        messages=[{"role": "user", "content": content}],
        answer=columns.pop("answer", None),
        images=list(args.image),
        videos=[VideoRef(args.video)] if args.video else [],
        meta=columns,
        task=args.task,
    )
    length = _length(args, completion)
    trajectory = Trajectory(
        sample_id="cli",
        group_id=0,
        token_ids=torch.zeros(length, dtype=torch.long),  # [T]: only the count matters here
        action_mask=torch.ones(length, dtype=torch.long),  # [T]
        prompt_length=0,
        completion_text=completion,
    )
    return sample, trajectory


def run(args: argparse.Namespace) -> int:
    """Score the example and print ``{column: score}`` as JSON (null = does not apply). 1 on a failure."""

    name = args.name.rsplit(":", 1)[-1].rsplit("/", 1)[-1] or "reward"
    spec = RewardSpec(name=name, ref=args.name, kwargs=_pairs(args.kwarg, "--kwarg"))
    try:
        runner = RewardRunner([spec], timeout_s=args.timeout, on_error="none", max_reward_errors=None)
    except (KeyError, ValueError, TypeError, ImportError, AttributeError, OSError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"mmreason reward: {message}", file=sys.stderr)
        return 2
    sample, trajectory = example(args)
    batch = runner([sample], [trajectory])
    values = batch.values[0].tolist()  # fp32: print 6 significant digits, not float32 noise
    scores = {n: (None if math.isnan(v) else float(f"{v:.6g}")) for n, v in zip(batch.names, values)}
    print(json.dumps(scores))
    for record in batch.errors:
        print(f"reward {record.reward!r} failed ({record.kind}):\n{record.message}", file=sys.stderr)
    return 1 if batch.errors else 0


def rows() -> list[tuple[str, str]]:
    """(name, one-line doc) of every reward, for `mmreason list rewards`."""
    return list_rewards()


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m mmreason.rewarding.cli``)."""
    parser = argparse.ArgumentParser(prog="mmreason reward", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
