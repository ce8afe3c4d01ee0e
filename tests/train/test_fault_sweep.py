"""The fault sweep: a real `mmreason train` run on a dataset with 5 % broken samples (a corrupt image, a
truncated video, a broken PDF, a missing file) and rewards that raise, hang and return NaN. The run completes,
saves its checkpoint, and what metrics.jsonl and events.log count equals what was injected, sample by sample.

Every count is known before the run: the uniform sampler walks one seeded permutation per epoch, so 80
samples at 8 prompts per step are each drawn exactly once in 10 steps, in an order the test replays.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from mmreason.cli import main
from mmreason.sampling.uniform import UniformSampler

N_SAMPLES, PER_STEP, G, SEED = 80, 8, 2, 0
STEPS = N_SAMPLES // PER_STEP
KINDS = ("image", "video", "pdf")
BROKEN = {15: "corrupt image", 10: "truncated video", 5: "broken PDF", 21: "missing file"}  # 4 of 80: 5 %
RAISES = {7, 33, 61}  # the `raises` reward raises on these samples' trajectories
NAN = {12, 44, 70}  # the `nan_for_some` reward returns NaN ("does not apply") on these
TIMEOUT_S = 4.0  # a healthy reward batch must finish inside it on a loaded 2-core machine

PACK = """
import json
from mmreason.taskpack import TaskPack
from mmreason.types import PageRef, Sample, VideoRef


def load(path, split="train", **options):
    samples = []
    for line in open(path):
        row = json.loads(line)
        media = {"image": {"images": [row["path"]]}, "video": {"videos": [VideoRef(row["path"])]},
                 "pdf": {"pages": [PageRef(row["path"], 0)]}}[row["kind"]]
        visual = {"type": "video" if row["kind"] == "video" else "image"}
        content = [visual, {"type": "text", "text": "What is shown? One word."}]
        samples.append(Sample(row["id"], [{"role": "user", "content": content}], answer="square", **media))
    return samples


PACK = TaskPack(name="fault_sweep", description="images, videos and PDF pages, some broken", load=load)
"""

REWARDS = """
import math
from mmreason.rewarding import per_sample


@per_sample
def raises(sample, trajectory, *, ids=()):
    if sample.id in ids:
        raise RuntimeError(f"injected failure on {sample.id}")
    return 1.0


@per_sample
def hangs(sample, trajectory, *, ids=()):
    while sample.id in ids:  # spins in pure Python until the worker process is killed
        pass
    return 0.5


@per_sample
def nan_for_some(sample, trajectory, *, ids=()):
    return math.nan if sample.id in ids else 0.25
"""


def _sid(index: int) -> str:
    return f"s{index:02d}"


def _video(path: Path, frames: int = 8) -> None:
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=4)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            image = np.full((32, 32, 3), 30 * i, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def _dataset(folder: Path) -> Path:
    folder.mkdir()
    rows = []
    for i in range(N_SAMPLES):
        kind = KINDS[i % 3]
        path = folder / f"{_sid(i)}.{ {'image': 'png', 'video': 'mp4', 'pdf': 'pdf'}[kind] }"
        if kind == "image":
            Image.new("RGB", (56, 56), (200, 40, 40)).save(path)
        elif kind == "video":
            _video(path)
        else:
            Image.new("RGB", (56, 56), (40, 40, 200)).save(path, "PDF", resolution=72)
        rows.append({"id": _sid(i), "kind": kind, "path": str(path)})
    for i, what in BROKEN.items():
        path = Path(rows[i]["path"])
        if what == "corrupt image":
            path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 20)
        elif what == "truncated video":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
        elif what == "broken PDF":
            path.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF broken")
        else:
            path.unlink()
    assert [rows[i]["kind"] for i in BROKEN] == ["image", "video", "pdf", "image"]
    data = folder / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def _draws() -> list[list[int]]:
    """The dataset indices each step draws, as the run's sampler (uniform, seed 0) will draw them."""
    sampler = UniformSampler(N_SAMPLES, seed=SEED)
    return [sampler.next_indices(PER_STEP) for _ in range(STEPS)]


@pytest.mark.slow
def test_fault_sweep_completes_and_counts_exactly_what_was_injected(tiny_model_dir, tmp_path):
    draws = _draws()
    assert sorted(i for step in draws for i in step) == list(range(N_SAMPLES))  # each sample once
    # The hanging sample is the last good one of its step, so the retry after the batch timeout scores every
    # other trajectory first and exactly its G trajectories time out.
    step_of_hang, hang = next(
        (k, good[-1])
        for k, step in enumerate(draws)
        if k > 0
        for good in [[i for i in step if i not in BROKEN]]
        if good[-1] not in RAISES | NAN
    )

    data = _dataset(tmp_path / "data")
    (tmp_path / "sweep_pack.py").write_text(textwrap.dedent(PACK))
    (tmp_path / "sweep_rewards.py").write_text(textwrap.dedent(REWARDS))

    def ids(indices) -> str:
        return "[" + ", ".join(_sid(i) for i in sorted(indices)) + "]"

    rewards = (
        f"rewards=[{{name: {tmp_path}/sweep_rewards.py:raises, kwargs: {{ids: {ids(RAISES)}}}}}, "
        f"{{name: {tmp_path}/sweep_rewards.py:hangs, kwargs: {{ids: {ids([hang])}}}}}, "
        f"{{name: {tmp_path}/sweep_rewards.py:nan_for_some, kwargs: {{ids: {ids(NAN)}}}}}, "
        "{name: vqa_exact}]"
    )
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    code = main(
        [
            "train",
            str(root / "configs/quickstart.yaml"),
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={out}",
            f"data.task={tmp_path}/sweep_pack.py:PACK",
            f"data.train_path={data}",
            "data.min_pixels=3136",
            "data.max_pixels=3136",
            f"rollout.num_generations={G}",
            "rollout.max_completion_length=2",
            f"prompts_per_step={PER_STEP}",
            f"max_steps={STEPS}",
            f"seed={SEED}",
            "save_steps=0",
            "eval_steps=0",
            "log_completions_steps=0",
            "num_threads=1",
            "max_bad_samples=10",
            "max_reward_errors=100",
            f"reward_timeout_s={TIMEOUT_S}",
            rewards,
        ]
    )
    assert code == 0

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert (out / f"checkpoint-{STEPS}" / "trainer_state.json").exists()

    # Broken media: each broken sample is skipped once, named with its file, and nothing else is skipped.
    bad = [e for e in events if e["event"] == "bad_sample"]
    assert sorted(e["sample_id"] for e in bad) == sorted(_sid(i) for i in BROKEN)
    assert all(Path(e["reason"].split("'")[1]).name.startswith(e["sample_id"]) for e in bad), bad
    assert rows[-1]["count/bad_samples"] == len(BROKEN)
    for k in range(STEPS):  # counted in the step that met them
        assert rows[k]["count/bad_samples"] == sum(i in BROKEN for s in draws[: k + 1] for i in s)

    # Failing rewards: every trajectory of a raising sample is one exception, of the hanging one one timeout.
    errors = [e for e in events if e["event"] == "reward_error"]
    by = Counter((e["reward"], e["sample_id"], e["detail_kind"]) for e in errors)
    expected = Counter({("raises", _sid(i), "exception"): G for i in RAISES})
    expected[("hangs", _sid(hang), "timeout")] = G
    assert by == expected
    assert all("injected failure" in e["message"] for e in errors if e["reward"] == "raises")
    assert rows[-1]["count/reward_errors"] == sum(expected.values()) == G * (len(RAISES) + 1)
    assert rows[step_of_hang]["count/reward_errors"] - (rows[step_of_hang - 1]["count/reward_errors"]) == G

    # NaN means "does not apply": left out of the mean, counted as missing, never an error or a NaN step.
    for k, (row, step) in enumerate(zip(rows, draws)):
        good = [i for i in step if i not in BROKEN]
        n = G * len(good)
        assert row["reward_missing/nan_for_some"] * n == pytest.approx(G * len(set(good) & NAN)), k
        assert row["reward_missing/raises"] * n == pytest.approx(G * len(set(good) & RAISES)), k
        assert row["reward_missing/hangs"] * n == pytest.approx(G * (hang in good)), k
        assert row["rewards/nan_for_some/mean"] == 0.25 and row["rewards/hangs/mean"] == 0.5
        assert row["reward/mean"] == row["reward/mean"]  # finite: no NaN reached the total
    assert rows[-1]["count/nan_steps"] == 0 and rows[-1]["count/env_faults"] == 0
