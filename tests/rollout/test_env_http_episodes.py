"""Multi-turn rollouts on the tiny model through an environment served over HTTP (``mmreason env-serve``):
the real server in a thread, the real client as each episode's environment, the real ``run_episodes``.

What must hold: an episode through the server is the episode in process, token for token (the tool's images
reach the next turn with their visual tokens); every episode's server session is closed when it is over; a
dead server, or a served environment that raises, ends episodes as counted faults, never the rollout; and a
training run through a pack whose environment is served counts those faults and finishes."""

from __future__ import annotations

import json
import socket
import textwrap
import threading
from pathlib import Path

import pytest
from PIL import Image
from rollout_helpers import generate_multiturn_group

pytest.importorskip("fastapi")  # the server's web stack (the dev and vllm extras)

from mmreason.cli import main  # noqa: E402
from mmreason.rollout.env_client import http_environment  # noqa: E402
from mmreason.rollout.env_server import EnvServer  # noqa: E402
from mmreason.rollout.environment import Observation  # noqa: E402
from mmreason.rollout.generate import GenerationSettings  # noqa: E402
from mmreason.rollout.multiturn import ENVIRONMENT_ERROR, ended_by_fault  # noqa: E402
from mmreason.rollout.prompts import build_prompt  # noqa: E402
from mmreason.rollout.replay import replay_episode  # noqa: E402
from mmreason.taskpack import TASKS  # noqa: E402
from mmreason.types import Sample  # noqa: E402

KEY = "episodes-test-key-0123456789"


class ZoomEnv:
    """Every turn is answered with a 56x56 crop of the sample's image (4 visual tokens); never done, so the
    episode ends at ``max_turns`` and only ``close()`` ends its server session. ``raise`` in the sample's id
    makes each step raise."""

    stop_strings = ("</tool_call>",)

    def reset(self, sample: Sample) -> None:
        self.image, self.sid, self.turns = sample.images[0], sample.id, 0

    def step(self, action_text: str) -> Observation:
        if "raise" in self.sid:
            raise RuntimeError("the tool crashed")
        self.turns += 1
        crop = self.image.crop((0, 0, 56, 56))
        return Observation(text=f"zoom {self.turns}:", images=[crop], info={"turn": self.turns})


def _sample(sid: str = "mt-0") -> Sample:
    image = Image.new("RGB", (84, 84), "blue")
    image.paste(Image.new("RGB", (28, 28), "yellow"), (14, 14))
    content = [{"type": "image"}, {"type": "text", "text": "Zoom in, then answer: what colour?"}]
    return Sample(id=sid, messages=[{"role": "user", "content": content}], answer="blue", images=[image])


@pytest.fixture
def served():
    """An ``EnvServer`` of ``ZoomEnv`` in a thread on a free port; (server, url), stopped after the test."""
    server = EnvServer(("127.0.0.1", 0), ZoomEnv, api_key=KEY)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    assert server.http.serving.wait(10)
    yield server, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(10)


KW = dict(group_id=0, num_generations=2, settings=GenerationSettings(max_new_tokens=5), max_turns=3)
LIMITS = dict(max_context=2048, seed=3, step=1)


def test_episodes_through_the_server_are_the_episodes_in_process(tiny, served, one_torch_thread):
    model, processor = tiny
    server, url = served
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    local = generate_multiturn_group(model, processor, prompt, ZoomEnv, **KW, **LIMITS)
    remote = generate_multiturn_group(model, processor, prompt, http_environment(url, api_key=KEY), **KW, **LIMITS)
    for a, b in zip(local, remote):
        assert b.end is None and [t.role for t in b.turns] == ["assistant", "observation"] * 2 + ["assistant"]
        assert b.token_ids.tolist() == a.token_ids.tolist() and b.action_mask.tolist() == a.action_mask.tolist()
        obs = b.turns[1]
        assert int((b.mm_token_type_ids[obs.start : obs.end] == 1).sum()) == 4  # the crop's visual tokens
        assert [x.tobytes() for x in b.reward_info["observation_images"]] == [
            x.tobytes() for x in a.reward_info["observation_images"]
        ]
        assert b.reward_info["observations"] == a.reward_info["observations"]
    counts = server.info()["counts"]
    assert server.info()["sessions"] == 0 and counts["opened"] == counts["closed"] == 2  # closed at the end


def test_a_dead_server_or_a_raising_environment_ends_episodes_as_faults(tiny, served, one_torch_thread):
    model, processor = tiny
    server, url = served
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    for where, sid, said in ((dead, "mt-0", "ConnectionRefusedError"), (url, "raise-1", "step raised RuntimeError")):
        prompt = build_prompt(processor, _sample(sid), max_prompt_length=1024)
        make = http_environment(where, api_key=KEY, stop_strings=("</tool_call>",))
        trajectories = generate_multiturn_group(model, processor, prompt, make, **KW, **LIMITS)
        for t in trajectories:
            assert ended_by_fault(t) and t.end.reason == ENVIRONMENT_ERROR and said in t.end.detail
            assert [turn.role for turn in t.turns] == ["assistant"]  # the first turn's answer was the fault
    assert server.info()["sessions"] == 0 and server.info()["counts"]["env_errors"] == 2


def test_rollout_environment_names_a_served_environment_by_its_url(served):
    """``rollout.environment: http://host:port`` (its args the client's) attaches the served environment to any
    pack, as a ``module:Factory`` reference does; a wrong client argument is a one-line error naming the key."""
    from mmreason.rollout.env_plugin import EnvironmentConfigError, load_environment

    server, url = served
    factory = load_environment(url, {"api_key": KEY, "stop_strings": ["</tool_call>"]})
    env = factory()
    env.reset(_sample())
    observation = env.step('<tool_call>{"name": "zoom"}</tool_call>')
    assert observation.text == "zoom 1:" and observation.images[0].size == (56, 56)
    env.close()
    assert server.info()["counts"]["opened"] >= 1 and server.info()["sessions"] == 0
    with pytest.raises(EnvironmentConfigError, match=r"rollout\.environment_args: the HTTP client does not take"):
        load_environment(url, {"api_key": KEY, "colour": "red"})


def test_an_sft_replay_through_the_server_closes_its_session(tiny, served):
    _, processor = tiny
    server, url = served
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    target = '<tool_call>{"name": "zoom"}</tool_call>It is blue.'
    t = replay_episode(processor, prompt, http_environment(url, api_key=KEY)(), target, "<|im_end|>")
    assert [turn.role for turn in t.turns] == ["assistant", "observation", "assistant"]
    assert (
        t.turns[1].text == "zoom 1:" and int((t.mm_token_type_ids[t.turns[1].start : t.turns[1].end] == 1).sum()) == 4
    )
    assert server.info()["counts"]["opened"] == 1 and server.info()["sessions"] == 0


PACK = """
from PIL import Image
from mmreason.rollout.env_client import http_environment
from mmreason.taskpack import TaskPack
from mmreason.types import Sample


def load(path, split="train", **options):
    content = [{{"type": "image"}}, {{"type": "text", "text": "Colour?"}}]
    return [Sample(sid, [{{"role": "user", "content": content}}], answer="red",
                   images=[Image.new("RGB", (56, 56), "red")]) for sid in ("s0", "raise-1")]


PACK = TaskPack(name="served_env", description="an environment served over HTTP", load=load,
                make_environment=http_environment({url!r}, api_key={key!r}))
"""


@pytest.mark.slow
def test_a_training_run_through_a_served_environment_counts_its_faults(tiny_model_dir, served, tmp_path):
    server, url = served
    (tmp_path / "served_pack.py").write_text(textwrap.dedent(PACK.format(url=url, key=KEY)))
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    args = [
        "train",
        str(root / "configs/quickstart.yaml"),
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        f"data.task={tmp_path}/served_pack.py:PACK",
        "data.train_path=unused",
        "rollout.num_generations=2",
        "rollout.max_completion_length=4",
        "rollout.max_turns=2",
        "prompts_per_step=2",
        "max_steps=1",
        "save_steps=0",
        "eval_steps=0",
        "num_threads=1",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
    ]
    try:
        assert main(args) == 0
    finally:  # the file pack is registered by its reference: keep the shared registry to the shipped packs
        TASKS._items.pop(f"{tmp_path}/served_pack.py:PACK", None)
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["count/env_faults"] == 2 and row["count/bad_samples"] == 0  # raise-1's two episodes
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    faults = [e for e in events if e["event"] == "env_fault"]
    assert {e["sample_id"] for e in faults} == {"raise-1"} and "the tool crashed" in faults[0]["reason"]
    assert server.info()["counts"]["opened"] == 4 and server.info()["sessions"] == 0
