"""Every registered policy loss has a test file of its own, ``tests/rl/losses/test_<name>.py``, with a worked
example from its formula, and that file cites the loss's heading in docs/methods/losses.md."""

from pathlib import Path

from mmreason.rl.registries import POLICY_LOSSES

HERE = Path(__file__).resolve().parent


def test_every_registered_loss_has_its_own_test_file():
    missing = [name for name in POLICY_LOSSES.names() if not (HERE / f"test_{name}.py").is_file()]
    assert not missing, f"losses without tests/rl/losses/test_<name>.py: {missing}"


def test_each_new_loss_file_cites_its_heading():
    worked = [name for name in POLICY_LOSSES.names() if (HERE / f"test_{name}.py").is_file()]
    uncited = [
        name
        for name in worked
        if f"docs/methods/losses.md#{name}" not in (HERE / f"test_{name}.py").read_text(encoding="utf-8")
    ]
    assert not uncited, f"test files that do not cite docs/methods/losses.md#<name>: {uncited}"
