"""Fixtures of the evaluation-harness tests: one torch thread, and `mmreason eval` run through its parser."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every evaluation test runs with one torch thread (tests/conftest.py: one_torch_thread)."""


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
