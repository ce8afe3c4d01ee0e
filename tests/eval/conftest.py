"""Fixtures of the evaluation-harness tests: one torch thread, and `mmreason eval` run through its parser."""

from __future__ import annotations

import argparse

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # Generation on the tiny model is a stream of small matmuls: on a shared 2-core machine a second
    # intra-op thread makes it many times slower, not faster.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def run_eval():
    """Run `mmreason eval ARGS...` (parsed by the real parser) and return its EvalOutcome."""
    from mmreason.eval.cli import add_arguments, build_config
    from mmreason.eval.harness import evaluate

    def run(*argv: str):
        parser = argparse.ArgumentParser(prog="mmreason eval")
        add_arguments(parser)
        return evaluate(build_config(parser.parse_args(list(argv))), progress=False)

    return run
