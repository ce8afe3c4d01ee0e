"""One gradient reduction per optimizer step (issue 48): on two gloo processes, DDP and FSDP2 with the
reduction off for all but the last of 4 micro-batches (``parallel.gradient_sync``, as the update sets it)
reduce once per bucket / unit where they reduced in every backward, and their averaged gradients equal the
every-backward ones."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).with_name("gradient_sync_main.py")


def test_one_reduction_per_optimizer_step_same_gradients(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(r), str(port), str(tmp_path)]) for r in (0, 1)]
    try:
        assert [p.wait(timeout=150) for p in procs] == [0, 0]
    finally:
        for p in procs:
            p.kill()
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    for mode in ("ddp", "fsdp"):
        for r in (x[mode] for x in results):
            assert r["once"] >= 1 and r["every"] == 4 * r["once"], (mode, r["every"], r["once"])  # 4 micro-batches
            assert r["once_grads"].keys() == r["every_grads"].keys()
            for name, g in r["every_grads"].items():
                got = torch.tensor(r["once_grads"][name])
                torch.testing.assert_close(got, torch.tensor(g), rtol=1e-6, atol=1e-7, msg=f"{mode}: {name}")
        assert results[0][mode]["once_grads"] == results[1][mode]["once_grads"]  # one average on both processes
