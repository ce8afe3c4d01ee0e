"""Session fixtures for the media tests (files written once into a temporary folder)."""

from __future__ import annotations

from pathlib import Path

import pytest
from media_fixtures import write_mp4, write_pdf


@pytest.fixture(scope="session")
def mp4(tmp_path_factory) -> Path:
    """3 s at 10 fps, 64 x 48, frame i a flat grey of level 8 * i."""
    return write_mp4(tmp_path_factory.mktemp("video") / "counter.mp4")


@pytest.fixture(scope="session")
def mp4_faststart(tmp_path_factory) -> Path:
    """The same frames with the index (moov) before the data."""
    return write_mp4(tmp_path_factory.mktemp("video") / "counter_faststart.mp4", faststart=True)


@pytest.fixture(scope="session")
def pdf(tmp_path_factory) -> Path:
    """Three flat-coloured pages of 200x100, 210x100 and 100x300 points."""
    return write_pdf(tmp_path_factory.mktemp("pdf") / "colors.pdf")
