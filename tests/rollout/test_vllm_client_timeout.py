"""Server mode's bounded generate call, without vLLM: a stand-in ``vllm-serve`` (the standard library's HTTP
server in a thread) answers ``/health`` like the real one and never answers ``/generate``. The client gives up
after ``generate_timeout`` seconds with ``EngineDied`` naming host:port and the setting, which the trainer
turns into a stop with the last finished step (as for a server that died)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.prompts import build_prompt
from mmreason.types import Sample


@pytest.fixture
def hanging_server():
    """(port, the number of /generate requests received) of a server whose /generate never answers."""
    release, seen = threading.Event(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            data = json.dumps({"model": "m", "max_model_len": 4096, "processor_kwargs": {}, "dead": None}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            release.wait(60)  # hangs (until the test ends)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
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
    prompt = build_prompt(processor, Sample(id="q", messages=[{"role": "user", "content": "Hi?"}]),
                          max_prompt_length=256)
    try:
        with pytest.raises(EngineDied, match=rf"127.0.0.1:{port} did not answer /generate within 1 s "
                                             r"\(rollout.vllm_generate_timeout\).*resume=auto"):
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
