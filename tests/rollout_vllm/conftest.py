"""Fixtures of the vLLM test modules: one ``mmreason vllm-serve`` on the tiny model for the session, shared by
the server tests and the async-generation tests (its start-up is the costliest part of either module).

Every test that uses it pushes the weights it needs first (a training run pushes before step 1, the client
tests push their policy), so what an earlier test left in the engine does not count. A test may kill it
(tests/rollout_vllm/test_vllm_server.py's last test does): the next test to ask starts a new one. The module
names keep its users adjacent (test_vllm_serve_async.py sorts just before test_vllm_server.py), so it is idle
for no other module's tests."""

from __future__ import annotations

import pytest

from tests.rollout_vllm.helpers import start_server, stop_server


class SharedServer:
    """``mmreason vllm-serve`` on ``model_dir`` (one engine, ``--max_model_len 1024``), started when first asked
    for and again when the last one died."""

    def __init__(self, model_dir, folder):
        self.model_dir, self.folder, self.proc, self.port, self.starts = model_dir, folder, None, None, 0

    def get(self) -> tuple:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                stop_server(self.proc, self.port)
            self.starts += 1
            self.proc, self.port = start_server(self.model_dir, self.folder / f"serve-{self.starts}.log")
        return self.proc, self.port

    def close(self) -> None:
        if self.proc is not None:
            stop_server(self.proc, self.port)


@pytest.fixture(scope="session")
def shared_server(tiny_model_dir, tmp_path_factory):
    server = SharedServer(tiny_model_dir, tmp_path_factory.mktemp("serve"))
    yield server
    server.close()


@pytest.fixture
def server(shared_server):
    """(process, port) of the session's ``mmreason vllm-serve`` on the tiny model, running."""
    return shared_server.get()


@pytest.fixture(scope="session")
def zoom_model(tiny_model_dir, tmp_path_factory):
    """(the tiny model taught to call the zoom example's tool with one fixed box, its rows' train.jsonl): the
    zoom example's rows and the teaching of tests/train/test_zoom_environment_e2e.py (~15 s), shared by the
    vLLM modules that play zoom episodes."""
    from tests.train.test_zoom_environment_e2e import _calls_the_tool, _rows

    folder = tmp_path_factory.mktemp("zoom")
    data = _rows(folder / "data")
    return _calls_the_tool(tiny_model_dir, data, folder / "calls"), data
