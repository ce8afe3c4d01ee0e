"""An environment served over HTTP (``mmreason env-serve``) and its client, on localhost with the real stack:
the real ``EnvServer`` (FastAPI on uvicorn) in a thread, the real ``HttpEnvironment`` talking to it.

What must hold (docs/extending.md, "Serve an environment over HTTP"): an episode played through the server
gives the client what the environment returned (text, PNG images pixel for pixel, video frames, metadata,
info, done); sessions are bounded, expire when idle and are closed when done; the server's environment
raising or overrunning is the episode's fault; a sample the server refuses (too large, over its bounds) or a
wrong key makes ``reset`` raise naming the sample or the key."""

from __future__ import annotations

import http.client
import json
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("fastapi")  # the server's web stack (the dev and vllm extras)

from mmreason.rollout.env_client import (  # noqa: E402
    EnvironmentServerError,
    EnvironmentServerRefused,
    HttpEnvironment,
    http_environment,
)
from mmreason.rollout.env_server import EnvLimits, EnvServer  # noqa: E402
from mmreason.rollout.env_wire import MediaBounds  # noqa: E402
from mmreason.rollout.environment import Observation  # noqa: E402
from mmreason.types import Sample  # noqa: E402

KEY = "env-test-key-0123456789"


class CropEnv:
    """A crop tool: each step answers with the top-left ``n x n`` crop of the sample's image (n: the action's
    length), two frames of it as a video, and facts; ``fail`` in the action raises, ``sleep`` hangs."""

    stop_strings = ("</tool_call>",)

    def reset(self, sample: Sample) -> None:
        if sample.id == "broken":
            raise FileNotFoundError("broken.png")
        self.image, self.turns = sample.images[0], 0

    def step(self, action_text: str) -> Observation:
        if "fail" in action_text:
            raise KeyError("no such tool")
        if "sleep" in action_text:
            time.sleep(30)
        self.turns += 1
        n = 8 * len(action_text)
        crop = self.image.crop((0, 0, n, n))
        frames = torch.from_numpy(np.stack([np.asarray(crop)] * 2)).permute(0, 3, 1, 2).contiguous()
        return Observation(
            text=f"crop {n}",
            images=[crop],
            videos=[frames],
            video_metadata=[{"fps": 2.0, "frames_indices": [0, 1]}],
            info={"turn": self.turns, "size": [n, n]},
            done=self.turns >= 2,
        )


def _sample(sid: str = "s0", size: int = 64) -> Sample:
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    return Sample(
        sid, [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}], images=[image]
    )


@pytest.fixture
def serve():
    """``serve(factory, **limits)`` -> (server, url): an ``EnvServer`` in a thread on a free port, stopped after."""
    started = []

    def start(factory=CropEnv, **limits):
        media = {k: limits.pop(k) for k in list(limits) if k in MediaBounds.__dataclass_fields__}
        server = EnvServer(
            ("127.0.0.1", 0), factory, api_key=KEY, limits=EnvLimits(**limits, media=MediaBounds(**media))
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        assert server.http.serving.wait(10)
        return server, f"http://127.0.0.1:{server.server_port}"

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_an_episode_over_http_gives_what_the_environment_returned(serve):
    server, url = serve()
    sample = _sample()
    local, remote = CropEnv(), http_environment(url, api_key=KEY)()
    assert remote.stop_strings == ("</tool_call>",)  # from /health
    local.reset(sample)
    remote.reset(sample)
    assert server.info()["sessions"] == 1
    for action in ("ab", "abcd"):
        want, got = local.step(action), remote.step(action)
        assert got.text == want.text and got.info == want.info and got.done == want.done
        assert [np.asarray(im).tolist() for im in got.images] == [np.asarray(im).tolist() for im in want.images]
        assert torch.equal(got.videos[0], want.videos[0]) and got.videos[0].dtype == torch.uint8
        assert got.video_metadata == want.video_metadata
    assert got.done and server.info()["sessions"] == 0  # a done episode is closed by the server
    assert server.info()["counts"]["opened"] == 1


def test_sessions_are_bounded_closed_and_expire(serve):
    server, url = serve(max_sessions=2, idle_timeout_s=0.3)
    envs = [HttpEnvironment(url, api_key=KEY) for _ in range(3)]
    envs[0].reset(_sample("a"))
    envs[1].reset(_sample("b"))
    envs[2].reset(_sample("c"))  # a third live episode: 503, held as the episode's fault
    with pytest.raises(EnvironmentServerError, match=r"503.*--max_sessions 2"):
        envs[2].step("x")
    envs[1].close()
    assert server.info()["sessions"] == 1
    envs[2].reset(_sample("c"))  # a slot is free again
    assert envs[2].step("x").text == "crop 8"
    time.sleep(0.5)  # both episodes idle past --idle_timeout_s
    server.expire()
    assert server.info()["sessions"] == 0 and server.info()["counts"]["expired"] == 2
    with pytest.raises(EnvironmentServerError, match=r"404.*no live episode"):
        envs[0].step("x")


def test_environment_errors_are_the_episode_s_fault_and_refusals_raise_at_reset(serve):
    server, url = serve(step_timeout_s=0.5, max_image_pixels=100 * 100, max_body_mb=1)
    env = HttpEnvironment(url, api_key=KEY)
    env.reset(_sample("s1"))
    with pytest.raises(EnvironmentServerError, match=r"'s1'.*422.*step raised KeyError"):
        env.step("fail")
    env.reset(_sample("s2"))
    with pytest.raises(EnvironmentServerError, match=r"'s2'.*504.*ran past 0.5 s"):
        env.step("sleep")
    assert server.info()["sessions"] == 0 and server.info()["counts"]["timeouts"] == 1
    with pytest.raises(EnvironmentServerRefused, match=r"'broken'.*cannot start: FileNotFoundError"):
        env.reset(_sample("broken"))
    with pytest.raises(EnvironmentServerRefused, match=r"'big'.*images\[0\]: 128x128 pixels"):
        env.reset(_sample("big", size=128))
    huge = _sample("huge")
    huge.meta = {"notes": "x" * (2 << 20)}
    with pytest.raises(EnvironmentServerRefused, match=r"'huge'.*over the environment server's --max_body_mb"):
        env.reset(huge)
    with pytest.raises(EnvironmentServerRefused, match="refused the key"):
        HttpEnvironment(url, api_key="another-key-0123456789").reset(_sample())


def test_the_server_refuses_malformed_calls(serve):
    server, url = serve()
    port = server.server_port

    def post(path: str, body) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers={"Authorization": f"Bearer {KEY}"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    assert post("/step", {"episode_id": "nope", "action": {"text": "x"}})[0] == 404
    assert post("/step", {"episode_id": "nope", "action": {"text": 3}})[0] == 400
    assert post("/reset", {"sample": {"id": "x"}})[0] == 400  # no messages
    code, body = post("/reset", {"sample": {"id": "x", "messages": [], "images": [{"png": "AAAA"}]}})
    assert code == 400 and "images[0]" in body["error"]
    code, body = post("/reset", {"sample": {"id": "x", "messages": [], "videos": [{"path": "a", "bogus": 1}]}})
    assert code == 400 and "videos[0]" in body["error"]
    assert server.info()["sessions"] == 0


class GateEnv(CropEnv):
    """``wait`` in the action holds the step until the test opens the gate."""

    gate = threading.Event()

    def step(self, action_text: str) -> Observation:
        if "wait" in action_text:
            assert GateEnv.gate.wait(20)
        return super().step(action_text)


def test_a_slow_step_holds_neither_other_episodes_nor_a_second_step_of_its_own(serve):
    server, url = serve(GateEnv)
    GateEnv.gate.clear()
    slow, other = HttpEnvironment(url, api_key=KEY), HttpEnvironment(url, api_key=KEY, timeout_s=5)
    slow.reset(_sample("slow"))
    other.reset(_sample("other"))
    got = {}
    thread = threading.Thread(target=lambda: got.update(obs=slow.step("wait")))
    thread.start()
    try:
        while not any(s.busy for s in server.sessions.values()):  # the slow step is inside the environment
            time.sleep(0.01)
        assert other.step("ab").text == "crop 16"  # served while the slow step waits (a 5 s client limit)
        twin = HttpEnvironment(url, api_key=KEY, timeout_s=5)
        twin.episode_id, twin.sample_id = slow.episode_id, "slow"
        with pytest.raises(EnvironmentServerError, match=r"409.*a step is in progress"):
            twin.step("ab")
    finally:
        GateEnv.gate.set()
        thread.join(30)
    assert got["obs"].text == "crop 32"
