"""Every alarm waits on metric keys the trainer writes (an alarm reading a key nothing logs can never fire).

Two checks: each alarm reads, by name, only the keys ``alarms.INPUTS`` declares for it (rows that record every
key looked up); and each declared key is one the trainer's code can write: a string key of a dict literal, a
subscript assignment (``m["kl"] = ...``) or an ``add("kl", ...)`` call somewhere in ``mmreason/`` outside the
health package (which only reads them)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mmreason.health import alarms
from mmreason.health import config as hc

ROOT = Path(__file__).resolve().parents[2] / "mmreason"
# keys reward_hacking finds by iterating a row, not by name
PATTERNS = (re.compile(r"rewards/[^/]+/mean"), re.compile(r"eval/.+"))


class _Recording(dict):
    """A metrics row that records every key looked up by name."""

    seen: set[str] = set()

    def get(self, key, default=None):
        _Recording.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        _Recording.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        _Recording.seen.add(key)
        return super().__contains__(key)


def _recorded(rows: list[dict]) -> alarms.History:
    """The bounded history the alarms read (as ``HealthMonitor`` keeps it), its per-key stores recording every
    key looked up by name."""
    history = alarms.History.of(rows)
    history.tails, history.heads = _Recording(history.tails), _Recording(history.heads)
    history.counts, history.last = _Recording(history.counts), _Recording(history.last)
    return history


def written_keys() -> set[str]:
    """String keys the project's code (outside mmreason/health) puts into metric dicts."""
    keys: set[str] = set()
    for path in ROOT.rglob("*.py"):
        if "health" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                found = node.keys
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                found = [t.slice for t in flat if isinstance(t, ast.Subscript)]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "add" and node.args:
                found = node.args[:1]
            else:
                continue
            keys |= {k.value for k in found if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return keys


def _rows(n: int, loud: bool) -> list[dict]:
    """``n`` step rows holding every declared input, an eval row every 10 and a reward component: values no
    alarm fires on (every condition is read), or values several fire on (their reasons are read too)."""
    quiet = {
        "reward/mean": 0.5,
        "loss": 0.1,
        "answers/top_share": 0.2,
        "answers/gold_top_share": 0.2,
        "answers/golds": 3,
        "answers/top": "red",
        "entropy": 1.0,
        "kl": 0.01,
        "frac_reward_zero_std": 0.1,
        "completion/clipped_ratio": 0.1,
        "episodes/cut_share": 0.1,
        "mismatch/logprob_abs_diff_mean": 0.0,
        "rewards/anls/mean": 0.5,
    }
    if loud:
        quiet.update({"answers/top_share": 0.95, "kl": 5.0, "mismatch/logprob_abs_diff_mean": 1.0})
    rows = [_Recording({"step": s, **quiet, "reward/mean": 0.5 + 0.01 * s}) for s in range(1, n + 1)]
    for r in rows[::10]:
        r["eval/shapes/accuracy"] = 0.5
    return rows


@pytest.mark.parametrize("name", sorted(alarms.ALARMS))
def test_each_alarm_reads_only_its_declared_inputs(name):
    cfg = getattr(hc.HealthConfig(), name)
    _Recording.seen = set()
    for loud in (False, True):
        alarms.ALARMS[name](_recorded(_rows(40, loud)), cfg)
    read = {k for k in _Recording.seen if not any(p.fullmatch(k) for p in PATTERNS)} - {"step"}
    assert read and read <= set(alarms.INPUTS[name]) | set(alarms.STEP_KEYS), read
    assert set(alarms.INPUTS[name]) <= read  # and the declaration names nothing it does not read


def test_every_alarm_input_is_a_key_the_trainer_writes():
    keys = written_keys()
    assert {"loss", "kl", "reward/mean"} <= keys  # the scan finds the trainer's own metrics
    assert set(alarms.INPUTS) == set(alarms.ALARMS)
    missing = {
        name: [k for k in (*inputs, *alarms.STEP_KEYS) if k not in keys] for name, inputs in alarms.INPUTS.items()
    }
    assert not {n: m for n, m in missing.items() if m}, missing
