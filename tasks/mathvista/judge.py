"""``--task_args extractor=judge,judge=PATH``: MathVista's answers extracted by a local model, the step the
benchmark gives to GPT-4 (``extract_answer.py``). The model is the one the ``vlm_judge`` reward loads
(``rewards.judge.load_judge``: any ``from_pretrained`` directory, kept in memory); it reads the question, its
options and the response (quoted and its special tokens broken, ``rewards.judge.inert``) and writes the final answer in at most
32 tokens, greedily. The extraction then goes through MathVista's normalization like any other.
"""

from __future__ import annotations

import threading

import torch

from mmreason.parsing import clip
from mmreason.rewards.judge import inert, load_judge
from mmreason.types import Sample

INSTRUCTION = (
    "Read the question and a model's response to it. Write only the final answer the response gives: "
    "the option letter for a multiple-choice question, the number for a numeric one, a Python list for a "
    "list. Write nothing else."
)
MAX_NEW_TOKENS = 32
_CACHE: dict[tuple[str, str], str] = {}
_LOCK = threading.Lock()


def judge_prompt(sample: Sample, response: str, tokenizer) -> str:
    choices = sample.meta.get("choices") or []
    options = "".join(f"\n({chr(ord('A') + k)}) {c}" for k, c in enumerate(choices))
    return (
        f"{INSTRUCTION}\n\nQuestion: {sample.meta.get('question', '')}{options}\n\n"
        f'Response (each line quoted with "> "):\n{inert(clip(response, 8_000), tokenizer)}\n\nExtracted answer:'
    )


def judge_extract(sample: Sample, completion: str) -> str:
    """The judge model's extraction of ``completion``'s answer (cached per question and completion)."""
    key = (sample.id, completion)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        model, processor = load_judge(
            sample.meta["judge"], sample.meta.get("judge_device", "cpu"), sample.meta.get("judge_dtype", "float32")
        )
        messages = [
            {
                "role": "user",
                "content": [{"type": "text", "text": judge_prompt(sample, completion, processor.tokenizer)}],
            }
        ]
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], return_tensors="pt").to(model.device)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        answer = processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        _CACHE[key] = (answer.strip().splitlines() or [""])[0].strip()
        return _CACHE[key]
