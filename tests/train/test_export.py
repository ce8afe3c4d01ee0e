"""`mmreason export`: a run trained one step with the real CLI (full weights, and LoRA) leaves the suite as a
Hugging Face folder that ``from_pretrained`` loads directly, and the loaded model's greedy completions and
log-probs on image and text prompts are the trained policy's; a LoRA merge happens in fp32 and the cast once;
bad sources and outputs are refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _train(model_dir, out, *extra):
    args = [
        "train",
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "max_steps=1",
        "learning_rate=3e-2",  # a step that moves the tiny model's outputs, so a dropped update shows
        "log_completions_steps=0",
        "num_threads=1",
        "eval_steps=0",
        *extra,
    ]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def full_run(tiny_model_dir, shapes_cache, tmp_path_factory):
    return _train(tiny_model_dir, tmp_path_factory.mktemp("export") / "full")


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, shapes_cache, tmp_path_factory):
    return _train(tiny_model_dir, tmp_path_factory.mktemp("export") / "lora", "model.lora=true", "model.lora_r=4")


def _prompts(processor):
    from mmreason.rollout.prompts import build_prompt
    from mmreason.types import Sample

    samples = [
        Sample(
            id="image",
            messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour?"}]}],
            images=[Image.new("RGB", (112, 84), (200, 30, 30))],
        ),
        Sample(id="text", messages=[{"role": "user", "content": "What is the answer?"}]),
    ]
    return [build_prompt(processor, s, max_prompt_length=1024) for s in samples]


def _greedy_and_logprobs(model, processor):
    """(prompt ids, greedy completion ids, per-token log-probs [N, T]) through the suite's own rollout path."""
    from mmreason.rollout.forward import collate, token_logprobs
    from mmreason.rollout.generate import GenerationSettings, generate_groups, suppressed_token_ids

    prompts = _prompts(processor)
    rows = generate_groups(
        model,
        processor,
        prompts,
        [0, 1],
        1,
        settings=GenerationSettings(max_new_tokens=6, temperature=0.0),
        seeds=[0, 1],
    )
    batch = collate(rows, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch, suppressed=suppressed_token_ids(processor.tokenizer))
    logp = logp * batch.action_mask
    return [p.input_ids.tolist() for p in prompts], [t.token_ids.tolist() for t in rows], logp


def _policy(checkpoint: Path, base: Path | None = None):
    """The trained policy as the trainer holds it: the checkpoint's weights, or the base model with the LoRA
    adapter applied unmerged (fp32)."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from mmreason.models import load_processor

    model = AutoModelForImageTextToText.from_pretrained(str(base or checkpoint / "model"), dtype=torch.float32)
    if base is not None:
        model = PeftModel.from_pretrained(model, str(checkpoint / "model"))
    return model.eval(), load_processor(checkpoint / "model")


def _exported(folder: Path):
    """The exported folder loaded as any transformers user would: the Auto classes on the folder alone."""
    from transformers import AutoModelForImageTextToText

    from mmreason.models import load_processor

    model = AutoModelForImageTextToText.from_pretrained(str(folder), dtype=torch.float32)
    return model.eval(), load_processor(folder)


def _assert_same_outputs(a, b):
    prompts_a, rows_a, logp_a = _greedy_and_logprobs(*a)
    prompts_b, rows_b, logp_b = _greedy_and_logprobs(*b)
    assert prompts_a == prompts_b  # the processor and chat template came along
    assert rows_a == rows_b
    torch.testing.assert_close(logp_a, logp_b, atol=2e-5, rtol=0)
    return logp_a


def test_a_full_run_exports_a_folder_transformers_loads_with_the_policys_outputs(
    full_run, tiny_model_dir, tmp_path, one_torch_thread
):
    out = tmp_path / "hf"
    assert main(["export", str(full_run), str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "export.json", "chat_template.jinja"} <= names
    assert any(n.startswith("preprocessor_config") or n.startswith("processor_config") for n in names)
    assert json.loads((out / "export.json").read_text())["step"] == 1
    base = load_file(Path(tiny_model_dir) / "model.safetensors")
    exported = load_file(out / "model.safetensors")
    assert any("visual" in k for k in exported)  # the vision tower came along
    assert len(exported) == len(base)
    policy = _policy(full_run / "checkpoint-1")
    logp = _assert_same_outputs(policy, _exported(out))
    _, _, logp_base = _greedy_and_logprobs(*_exported_base(tiny_model_dir))
    assert (logp - logp_base).abs().max() > 1e-3  # the step moved the model: the export is not the base


def _exported_base(tiny_model_dir):
    from transformers import AutoModelForImageTextToText

    from mmreason.models import load_processor

    model = AutoModelForImageTextToText.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    return model.eval(), load_processor(tiny_model_dir)


def test_a_lora_run_merges_in_fp32_and_casts_once(lora_run, tiny_model_dir, tmp_path, one_torch_thread):
    checkpoint = lora_run / "checkpoint-1"
    assert (checkpoint / "model" / "adapter_config.json").is_file()
    merged = tmp_path / "merged"
    assert main(["export", str(checkpoint), str(merged)]) == 0
    policy = _policy(checkpoint, base=Path(tiny_model_dir))
    logp = _assert_same_outputs(policy, _exported(merged))
    _, _, logp_base = _greedy_and_logprobs(*_exported_base(tiny_model_dir))
    assert (logp - logp_base).abs().max() > 1e-3  # the adapter was merged, not dropped
    # bf16: the fp32 merge cast once, bit for bit (merging in bf16 would round twice)
    bf16 = tmp_path / "bf16"
    assert main(["export", str(lora_run), str(bf16), "--dtype", "bfloat16"]) == 0
    fp32 = load_file(merged / "model.safetensors")
    half = load_file(bf16 / "model.safetensors")
    assert half.keys() == fp32.keys()
    for key, value in half.items():
        assert value.dtype == torch.bfloat16 and torch.equal(value, fp32[key].to(torch.bfloat16)), key
    assert json.loads((bf16 / "config.json").read_text())["dtype"] == "bfloat16"


def test_a_lora_run_exports_its_adapter_alone(lora_run, tiny_model_dir, tmp_path, one_torch_thread):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from mmreason.models import load_processor

    out = tmp_path / "adapter"
    assert main(["export", str(lora_run), str(out), "--adapter"]) == 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]) == Path(tiny_model_dir).resolve()
    base = AutoModelForImageTextToText.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, str(out)).eval(), load_processor(out)
    _assert_same_outputs(_policy(lora_run / "checkpoint-1", base=Path(tiny_model_dir)), loaded)


def test_a_checkpoint_split_into_several_files_is_gathered(full_run, tmp_path):
    """A checkpoint whose weights ``save_pretrained`` split into shards (an index and several files) exports
    as one whole model with the same tensors."""
    from transformers import AutoModelForImageTextToText

    checkpoint = tmp_path / "run" / "checkpoint-1"
    shutil.copytree(full_run / "checkpoint-1", checkpoint)
    model = AutoModelForImageTextToText.from_pretrained(str(checkpoint / "model"), dtype=torch.float32)
    (checkpoint / "model" / "model.safetensors").unlink()
    (checkpoint / "checksums.json").unlink()  # rewritten below for the new files, as a save would
    model.save_pretrained(checkpoint / "model", max_shard_size="200KB")
    assert len(list((checkpoint / "model").glob("model-*.safetensors"))) > 1
    from mmreason.train.checkpoint_verify import write_manifest

    write_manifest(checkpoint)
    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    whole = load_file(out / "model.safetensors")
    original = load_file(full_run / "checkpoint-1" / "model" / "model.safetensors")
    assert whole.keys() == original.keys()
    assert all(torch.equal(whole[k], original[k]) for k in whole)


def test_bad_sources_and_outputs_are_refused_in_one_line(full_run, tmp_path, capsys):
    def refused(*args) -> str:
        capsys.readouterr()
        assert main(["export", *map(str, args)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    empty_run = tmp_path / "empty"
    empty_run.mkdir()
    assert "no complete checkpoint" in refused(empty_run, tmp_path / "o1")
    assert "not a folder" in refused(tmp_path / "missing", tmp_path / "o2")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("keep me")
    assert "not empty" in refused(full_run, busy)
    assert (busy / "x").read_text() == "keep me"
    damaged = tmp_path / "run" / "checkpoint-1"
    shutil.copytree(full_run / "checkpoint-1", damaged)
    weights = damaged / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    assert "model/model.safetensors" in refused(damaged, tmp_path / "o3")
    # a run whose only checkpoint is damaged: nothing to fall back to; the run directory is left as it was
    assert "every checkpoint" in refused(tmp_path / "run", tmp_path / "o4")
    assert damaged.is_dir() and not any(p.name.startswith("o") for p in tmp_path.iterdir())
