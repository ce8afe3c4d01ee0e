"""What a launch refuses before the accelerator is made and the model loads (``train/launch_checks.py``), and
hub ids resolved from the Hugging Face cache by ``train``, ``sft`` and ``eval`` alike (``models/hub.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.train.launch_checks import pre_ampere_refusal

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")

# What `accelerate launch --config_file X` puts in the processes' environment for a config with
# `distributed_type: DEEPSPEED`, `mixed_precision: bf16`, `zero_stage: 3` (accelerate 1.16,
# `accelerate.utils.launch.prepare_deepspeed_cmd_env`).
DEEPSPEED_ENV = {
    "ACCELERATE_USE_DEEPSPEED": "true",
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
    "ACCELERATE_MIXED_PRECISION": "bf16",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
    "ACCELERATE_CONFIG_DS_FIELDS": "",
}


def _args(command: str, model: str, out: Path, *extra: str) -> list[str]:
    return [
        command,
        QUICKSTART,
        f"model.name_or_path={model}",
        f"output_dir={out}",
        "max_steps=1",
        "save_steps=0",
        "prompts_per_step=2",
        "mini_batch_size=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=3",
        "num_threads=1",
        "eval_steps=0",
        "log_completions_steps=0",
        *extra,
    ]


def _error(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_deepspeed_launch_is_refused_before_anything_loads(command, tmp_path, monkeypatch, capsys):
    for key, value in DEEPSPEED_ENV.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "run"
    # the model directory does not exist: a check after loading would name it instead
    assert main(_args(command, str(tmp_path / "no-model"), out)) == 2
    lines = _error(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mmreason {command}: error: distributed_type: DEEPSPEED"), lines
    assert "FSDP2" in lines[0] and "configs/accelerate/fsdp.yaml" in lines[0], lines
    assert not out.exists()  # refused before the run claimed its output_dir


@pytest.mark.parametrize(
    "capability, settings, refused",
    [
        ((7, 0), dict(dtype="bfloat16"), "model.dtype=bfloat16"),  # V100
        ((7, 5), dict(dtype="bf16"), "model.dtype=bf16"),  # T4
        ((7, 5), dict(mixed_precision="bf16"), "mixed_precision: bf16"),
        ((6, 1), dict(attn_implementation="flash_attention_2"), "model.attn_implementation=flash_attention_2"),
        ((7, 0), dict(dtype="float16", mixed_precision="fp16", attn_implementation="sdpa"), None),
        ((7, 0), dict(dtype="auto", attn_implementation="auto"), None),  # auto picks fp32 and SDPA there
        ((8, 0), dict(dtype="bfloat16", mixed_precision="bf16", attn_implementation="flash_attention_2"), None),
        ((9, 0), dict(dtype="bfloat16", mixed_precision="bf16", attn_implementation="flash_attention_2"), None),
        (None, dict(dtype="bfloat16", mixed_precision="bf16"), None),  # the CPU runs bf16 natively
    ],
)
def test_bf16_and_flash_attention_are_refused_before_ampere(capability, settings, refused):
    why = pre_ampere_refusal(
        capability, **{"dtype": "auto", "mixed_precision": "no", "attn_implementation": "auto", **settings}
    )
    if refused is None:
        assert why is None
        return
    assert why is not None and len(why.splitlines()) == 1
    assert why.startswith(refused) and f"{capability[0]}.{capability[1]}" in why
    fix = {"model.dtype": "float16", "mixed_precision": "fp16", "model.attn_implementation": "sdpa"}
    assert next(v for k, v in fix.items() if refused.startswith(k)) in why


HUB_ID = "mmreason-test/tiny-vl"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tiny_model_dir, tmp_path, monkeypatch):
    """A Hugging Face cache holding ``HUB_ID`` as huggingface_hub lays it out (``models--ORG--NAME``,
    ``refs/main`` naming the snapshot), read offline."""
    import huggingface_hub.constants as hub

    cache = tmp_path / "hf-cache"
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    shutil.copytree(tiny_model_dir, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # huggingface_hub reads both variables once, at import: set them where it looks
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    return repo / "snapshots" / REVISION


@pytest.mark.parametrize("command", ["sft", "train"])
def test_a_hub_id_trains_from_the_cache_offline(hub_cache, shapes_cache, tmp_path, command):
    out = tmp_path / "run"
    assert main(_args(command, HUB_ID, out)) == 0
    assert (out / "metrics.jsonl").read_text().strip()
    assert f"name_or_path: {HUB_ID}" in (out / "config.yaml").read_text()  # the run records the id, not the path


def test_eval_resolves_a_hub_id_by_the_same_function(hub_cache):
    from mmreason.eval.model import resolve_model

    assert resolve_model(HUB_ID).weights == hub_cache


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_hub_id_not_in_the_cache_is_one_line_offline(hub_cache, tmp_path, command, capsys):
    assert main(_args(command, "mmreason-test/absent", tmp_path / "run")) == 2
    lines = _error(capsys)
    assert len(lines) == 1, lines
    assert "model.name_or_path='mmreason-test/absent'" in lines[0] and "not in the Hugging Face cache" in lines[0]
    assert str(hub_cache.parents[2]) in lines[0]  # the cache it looked in
