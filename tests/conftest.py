"""Shared fixtures: one tiny model checkpoint per test session, built through the real CLI code path."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under xdist (the README's `-n 2`) each worker gets one core's worth: one torch thread, and one for the
# processes a test starts; otherwise at most two.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def one_torch_thread():
    """One intra-op torch thread for the test: generation on the tiny model is a stream of small matmuls,
    and on a shared 2-core machine a second thread makes it many times slower, not faster."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from mmreason.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny(tiny_model_dir):
    """(model, processor) loaded through the Auto classes, fp32, eval mode."""
    from mmreason.models import ModelConfig, load_model, load_processor

    processor = load_processor(tiny_model_dir)
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False)
    return model, processor


@pytest.fixture(scope="session")
def shapes_cache(tmp_path_factory):
    """Generated shapes data goes to a per-session cache, not the user's home."""
    path = tmp_path_factory.mktemp("cache")
    os.environ["MMREASON_CACHE"] = str(path)
    return path


def pytest_collection_modifyitems(config, items):
    """Put every test of a module that starts processes with ``accelerate launch`` on one xdist worker
    (``--dist loadgroup``): those launches share accelerate's default port, so they must not overlap."""
    launches: dict[str, bool] = {}
    for item in items:
        path = str(item.path)
        if path not in launches:
            text = item.path.read_text(errors="replace")
            launches[path] = '"launch"' in text and "accelerate" in text
        if launches[path]:
            item.add_marker(pytest.mark.xdist_group("processes"))
