"""Fixtures of the benchmark tests: one torch thread (tests/conftest.py: one_torch_thread)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every benchmark test runs with one torch thread."""
