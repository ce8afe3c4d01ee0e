"""The loss docs/extending.md writes ("Write a loss") runs as written: named by reference, it gets the record and
its option, its value is the hand-worked one, a clip key it does not read (or a closed option out of its set)
stops the run at start-up, and the documented command trains two steps with it."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest
import torch

from mmreason import rl
from mmreason.cli import main
from mmreason.config import ConfigError, load_config
from mmreason.train.config import TrainConfig, check_algorithm_options

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")


def _user_loss(tmp_path: Path) -> str:
    code = re.search(r"Save this as `my_loss.py`:\n\n```python\n(.*?)```", DOC, re.DOTALL).group(1)
    (tmp_path / "my_loss.py").write_text(code)
    return f"{tmp_path}/my_loss.py:entropy_reinforce"


def test_the_documented_loss_reads_the_record_and_its_option(tmp_path):
    ref = _user_loss(tmp_path)
    lp = torch.log(torch.tensor([[0.5, 0.25]]))
    entropy = torch.tensor([[1.0, 0.0]])
    # weights 1 + 0.5 * [1, 0] = [1.5, 1]; A = 2: tokens -1.5*2*ln(1/2) and -2*ln(1/4); token mean 3.5 ln 2
    out = rl.policy_loss(ref, lp, lp, torch.tensor([2.0]), torch.ones(1, 2), entropy=entropy, scale=0.5)
    assert out.loss.item() == pytest.approx(3.5 * math.log(2), abs=1e-5)
    plain = rl.call_loss(rl.POLICY_LOSSES.get(ref), rl.LossInputs(lp, lp, torch.tensor([2.0]), torch.ones(1, 2)), {})
    assert plain.loss.item() == pytest.approx(3 * math.log(2), abs=1e-5)  # no entropy: plain REINFORCE
    cfg = load_config(
        TrainConfig,
        ROOT / "configs" / "quickstart.yaml",
        [f"algorithm.policy_loss={ref}", "algorithm.epsilon_high=0.28"],
    )
    with pytest.raises(ConfigError, match=r"takes no epsilon_high; its options: scale"):
        check_algorithm_options(cfg)


def test_a_closed_option_of_a_loss_is_checked_at_start_up():
    cfg = load_config(
        TrainConfig,
        ROOT / "configs" / "quickstart.yaml",
        ["algorithm.policy_loss=disco", "algorithm.loss_options={score: prob}"],
    )
    with pytest.raises(
        ConfigError, match=r"loss_options: policy loss 'disco': score must be one of \('logL', 'Lratio'\)"
    ):
        check_algorithm_options(cfg)


@pytest.mark.slow
def test_the_documented_command_trains_two_steps(tiny_model_dir, shapes_cache, tmp_path):
    ref = _user_loss(tmp_path)
    command = re.search(r"```bash\n(mmreason train [^\n]*my_loss[^\n]*)\n```", DOC).group(1)
    out = tmp_path / "run"
    where = {"configs/": f"{ROOT}/configs/", "my_loss.py:entropy_reinforce": ref, "runs/my_loss": str(out)}
    argv = shlex.split(command)[1:]
    for old, new in where.items():
        argv = [word.replace(old, new) for word in argv]
    small = "prompts_per_step=2 rollout.num_generations=4 rollout.max_completion_length=4 save_steps=0 eval_steps=0"
    assert main([*argv, f"model.name_or_path={tiny_model_dir}", *small.split(), "num_threads=1"]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all(math.isfinite(m["loss"]) for m in metrics)
