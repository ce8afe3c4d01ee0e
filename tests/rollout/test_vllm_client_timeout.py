"""Server mode's bounded generate call, without vLLM: the real ``vllm-serve`` HTTP layer (``EngineServer``) in
a thread, its engine a stand-in whose generate never returns. The client gives up after ``generate_timeout``
seconds with ``EngineDied`` naming host:port and the setting, which the trainer turns into a stop with the
last finished step (as for a server that died)."""

from __future__ import annotations

import threading

import pytest

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends.vllm_server import EngineServer
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.prompts import build_prompt
from mmreason.types import Sample


@pytest.fixture
def hanging_server(tmp_path, monkeypatch):
    """(port, the number of generate calls the engine received) of a server whose engine never answers."""
    release, seen = threading.Event(), []

    class Hanging:
        model_dir = "m"

        def generate_requests(self, requests, n, settings, seeds):
            seen.append("/generate")
            release.wait(60)  # hangs (until the test ends)
            raise RuntimeError("released")

    monkeypatch.setenv("MMREASON_VLLM_API_KEY", "k")
    server = EngineServer(("127.0.0.1", 0), Hanging(), api_key="k", max_model_len=4096, weights_dir=tmp_path)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port, seen
    release.set()
    server.shutdown()
    server.server_close()


def test_a_generate_call_the_server_never_answers_is_an_engine_death_after_the_timeout(tiny, hanging_server):
    from mmreason.rollout.backends.vllm_client import VLLMClient

    _, processor = tiny
    port, seen = hanging_server
    client = VLLMClient("127.0.0.1", port, processor.tokenizer, server_timeout=5, generate_timeout=1.0)
    prompt = build_prompt(
        processor, Sample(id="q", messages=[{"role": "user", "content": "Hi?"}]), max_prompt_length=256
    )
    try:
        with pytest.raises(
            EngineDied,
            match=rf"127.0.0.1:{port} did not answer /generate within 1 s "
            r"\(rollout.vllm_generate_timeout\).*resume=auto",
        ):
            client.generate_groups([prompt], [0], 2, GenerationSettings(max_new_tokens=4), [7])
    finally:
        client.close()
    # the message is the timeout's: had the client waited, the server would have hung up after 60 s instead
    assert seen == ["/generate"]


def test_the_generate_timeout_is_a_checked_setting():
    from mmreason.config import ConfigError, load_config
    from mmreason.train.config import TrainConfig

    assert load_config(TrainConfig, None, []).rollout.vllm_generate_timeout == 600.0
    cfg = load_config(TrainConfig, None, ["rollout.vllm_generate_timeout=30"])
    assert cfg.rollout.vllm_generate_timeout == 30.0
    with pytest.raises(ConfigError, match="vllm_generate_timeout"):
        load_config(TrainConfig, None, ["rollout.vllm_generate_timeout=0"])
