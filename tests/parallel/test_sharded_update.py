"""The sharded (FSDP2) update's memory savers on two CPU processes over gloo (tests/parallel/sharded_update_main.py
under `accelerate launch` and configs/accelerate/fsdp_cpu.yaml, the trainer's own setup):

- the chunked LM head runs on the sharded head (inside the head's forward, rollout/sharded_head.py): log-probs,
  entropies and every gradient equal a whole model's to fp32 rounding, and autograd keeps no [.., V] tensor
  (before, a DTensor head was not "chunkable" and the whole [tokens x vocab] logits were kept);
- the reference model is sharded like the policy (before, a whole copy on every process);
- the rollout phase does not gather the policy when an engine generates (before, ``gathered()`` unsharded it);
- ``gathered()`` gives every unit back its own ``reshard_after_forward`` (before, the launcher's value for all).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"
SCRIPT = Path(__file__).with_name("sharded_update_main.py")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ACCELERATE.exists() and shutil.which("accelerate") is None, reason="no accelerate CLI"),
]


@pytest.fixture(scope="module")
def reports(tiny_model_dir, shapes_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded")
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    overrides = [
        f"model.name_or_path={tiny_model_dir}",
        "data.task=shapes",
        f"output_dir={out / 'run'}",
        "prompts_per_step=1",
        "rollout.num_generations=2",
        "algorithm.beta=0.04",
        "num_threads=1",
        "eval_steps=0",
    ]
    config = ROOT / "configs" / "accelerate" / "fsdp_cpu.yaml"
    try:
        done = subprocess.run(
            [str(ACCELERATE), "launch", "--config_file", str(config), str(SCRIPT), str(out), *overrides],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=out,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the launch did not end (a process waits at a collective): {str(exc.stderr)[-3000:]}")
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_chunked_head_on_a_sharded_head_equals_the_whole_model(reports):
    for r in reports:
        h = r["head"]
        assert h["trained_tokens"] > 0 and h["grad_names_equal"]
        assert h["lp_diff"] < 1e-5 and h["ent_diff"] < 1e-5
        assert h["grad_diff"] < 1e-5 * max(1.0, h["grad_scale"])
        assert h["vocab_saved_logits_path"] > 0  # the check sees the logits path's [.., V] tensors
        assert h["vocab_saved"] == 0, "the sharded head kept [.., V] logits for backward"


def test_reference_model_is_sharded_like_the_policy(reports):
    for r in reports:
        ref = r["reference"]
        assert ref["sharded"] and ref["shards_after_forward"]
        assert ref["local_share"] < 0.75  # about half of the parameters on each of 2 processes
        assert ref["lp_diff"] < 1e-5


def test_rollouts_from_an_engine_leave_the_policy_sharded(reports):
    for r in reports:
        assert r["rollouts"]["sharded_while_generating"] == [True]


def test_gathered_restores_each_units_own_reshard_setting(reports):
    for r in reports:
        before, after = r["reshard"]["before"], r["reshard"]["after"]
        assert after == before
        assert before[0] is False and before[1] is False and True in before  # root, a unit set by hand, the rest
