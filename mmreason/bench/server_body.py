"""`mmreason bench server-body`: what a hostile ``/generate`` body costs ``mmreason vllm-serve`` before and after
its shape count (``vllm_wire.check_body_shape``).

The body is ``{"requests": [[], [], ...]}`` of ``--mib`` MiB: parsed whole (what the server did before the
count) it becomes millions of lists; counted, it is refused after two passes over its bytes. Prints the median
time of each over ``--repeats`` runs, their ratio, and the peak memory of each (tracemalloc, a separate run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from mmreason.rollout.backends.vllm_wire import WireError, WireLimits, check_body_shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mib", type=float, default=40.0, help="body size (MiB)")
    parser.add_argument("--repeats", type=int, default=3)


def _count(body: bytes) -> None:
    try:
        check_body_shape(body, WireLimits())
    except WireError:
        return
    raise AssertionError("a body of empty lists passed the shape count")


def _median_seconds(fn: Callable[[bytes], Any], body: bytes, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(body)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _peak_mib(fn: Callable[[bytes], Any], body: bytes) -> float:
    tracemalloc.start()
    try:
        fn(body)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run(args: argparse.Namespace) -> int:
    body = b'{"requests": [' + b"[]," * int(args.mib * 2**20 / 3) + b"[]]}"
    parse, count = (_median_seconds(fn, body, args.repeats) for fn in (json.loads, _count))
    print(f"body: {len(body) / 2**20:.1f} MiB of empty lists")
    print(f"json.loads (parse whole): {parse:.3f} s, peak {_peak_mib(json.loads, body):.0f} MiB")
    print(f"shape count (refused):    {count:.3f} s, peak {_peak_mib(_count, body):.1f} MiB")
    print(f"ratio: {parse / count:.0f}x")
    return 0
