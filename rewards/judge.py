"""A local vision-language model as a judge: it sees the sample's images (or video frames, or pages), the
question, the reference and the candidate answer, and its probability of answering "Yes" is the reward.

    score = P(yes) / (P(yes) + P(no))   at the first generated position, from one forward pass

where P(yes) sums the next-token probabilities of the first tokens of "Yes", "yes", " Yes", " yes"
(and likewise for no; a first token shared by a yes and a no spelling is left out). One forward per batch of ``batch_size`` samples, left-padded; no sampling, so
the score is deterministic. The prompt is the Jinja template ``judge_prompt.jinja`` next to this file
(variables: ``question``, ``reference``, ``answer``, ``completion``); pass ``template`` to use your own.
The model is any ``from_pretrained`` directory that ``AutoModelForImageTextToText`` loads, kept in
memory after the first call.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from mmreason import media
from mmreason.parsing import as_text, final_answer
from mmreason.rewarding import reward
from mmreason.rewards.accuracy import references
from mmreason.types import Sample, Trajectory

DEFAULT_TEMPLATE = Path(__file__).with_name("judge_prompt.jinja")
YES = ("Yes", "yes", " Yes", " yes")
NO = ("No", "no", " No", " no")
_JUDGES: dict[tuple[str, str, str], Any] = {}
_LOCK = threading.Lock()


DELIMITERS = ("<candidate>", "</candidate>")  # around the policy's answer in the default template
# any spelling of a delimiter once NFKC-normalised: either case, whitespace or invisible characters anywhere
# inside, angle brackets or their look-alikes
_OPEN, _CLOSE = "<\u2039\u2329\u27e8\u3008\u300a\u00ab\ufe64\uff1c", ">\u203a\u232a\u27e9\u3009\u300b\u00bb\ufe65\uff1e"
_GAP = r"[\s\u200b-\u200f\u2060-\u2064\ufeff]*"
_DELIMITER = re.compile(f"[{_OPEN}]{_GAP}/?{_GAP}" + _GAP.join("candidate") + f"{_GAP}[{_CLOSE}]", re.IGNORECASE)
QUOTE = "> "  # the start of every line of the candidate's text in the judge's prompt


def load_judge(path: str, device: str = "cpu", dtype: str = "float32"):
    """(model, processor) from a local directory, cached per (path, device, dtype)."""
    key = (str(path), device, dtype)
    with _LOCK:
        if key not in _JUDGES:
            from transformers import AutoModelForImageTextToText, AutoProcessor

            processor = AutoProcessor.from_pretrained(str(path))
            processor.tokenizer.padding_side = "left"  # the last position is the one scored
            model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=getattr(torch, dtype))
            _JUDGES[key] = (model.to(device).eval(), processor)
        return _JUDGES[key]


def defang(text: str, tokenizer: Any) -> str:
    """The policy's text with every special token of the judge's tokenizer broken (a zero-width space after its
    first character), so an answer cannot close the judge's turn and write its reply; markers of the
    template's answer delimiters are broken too."""
    specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
    specials |= {t for t in getattr(tokenizer, "get_added_vocab", dict)() if t.startswith("<") and t.endswith(">")}
    for token in sorted(specials | set(DELIMITERS), key=len, reverse=True):
        if len(token) > 1:
            text = text.replace(token, token[0] + "\u200b" + token[1:])
    return text


def inert(text: str, tokenizer: Any) -> str:
    """The policy's text as it may enter the judge's prompt: NFKC-normalised (full-width and other
    compatibility forms become the plain ones the judge reads), every spelling of the delimiters written with
    square brackets (``[/candidate]``), every line (whatever breaks it: ``str.splitlines``) quoted with
    ``QUOTE`` so a line such as ``Reference answer: ...`` or ``Answer: Yes`` cannot pass for one of the
    prompt's own, and the judge's special tokens broken (``defang``)."""
    text = unicodedata.normalize("NFKC", text)
    text = _DELIMITER.sub(lambda m: "[" + ("/" if "/" in m.group(0) else "") + "candidate]", text)
    return defang("\n".join(QUOTE + line for line in (text.splitlines() or [""])), tokenizer)


def render_prompt(template_path: str | Path, **values: Any) -> str:
    """The judge prompt: the Jinja template rendered with ``values`` (missing variables render empty) in the
    bounded sandbox of ``mmreason.templating``; a template that breaks a bound is one line naming it."""
    from mmreason import templating

    try:
        return templating.render(_judge_template(str(template_path)), values)
    except templating.TemplateLimit as err:
        raise ValueError(f"vlm_judge template {template_path}: {err}") from None


@lru_cache(maxsize=8)
def _judge_template(path: str):
    import jinja2

    from mmreason import templating

    try:
        source = Path(path).read_text(encoding="utf-8")
        return templating.compile_template(source, strict=False)
    except (OSError, UnicodeDecodeError, jinja2.TemplateSyntaxError, templating.TemplateLimit) as err:
        raise ValueError(f"vlm_judge template {path}: {err}") from None


def sample_visuals(sample: Sample, max_images: int, max_frames: int, max_pixels: int) -> list:
    """The sample's pictures as RGB PIL images: its images, then frames of its first video, then pages."""

    pictures = [media.load_image(src, max_pixels=max_pixels) for src in sample.images[:max_images]]
    if sample.videos and len(pictures) < max_images + max_frames:
        video = sample.videos[0]
        clip = media.load_video(
            video.path, num_frames=max_frames, start=video.start, end=video.end, max_pixels=max_pixels
        )
        pictures += clip.to_pil()[:max_frames]
    for page in sample.pages[: max(0, max_images - len(pictures))]:
        if str(page.source).lower().endswith(".pdf"):
            pictures += media.render_pages(page.source, [page.index], max_pixels=max_pixels)
        else:
            pictures.append(media.load_image(page.source, max_pixels=max_pixels))
    return pictures


def _first_token_ids(tokenizer: Any, words: tuple[str, ...]) -> list[int]:
    ids = {
        tokenizer.encode(w, add_special_tokens=False)[0] for w in words if tokenizer.encode(w, add_special_tokens=False)
    }
    return sorted(ids)


@torch.no_grad()
def judge_scores(model: Any, processor: Any, prompts: list[str], pictures: list[list]) -> list[float]:
    """P(yes) / (P(yes) + P(no)) for each (prompt, pictures) pair, in one batched forward."""
    tokenizer = processor.tokenizer
    yes, no = _first_token_ids(tokenizer, YES), _first_token_ids(tokenizer, NO)
    shared = set(yes) & set(no)  # e.g. a lone space token that starts both " Yes" and " No"
    yes, no = [i for i in yes if i not in shared], [i for i in no if i not in shared]
    if not yes or not no:
        raise ValueError("the judge's tokenizer does not tell 'Yes' from 'No' by their first token")
    texts = []
    for prompt, pics in zip(prompts, pictures):
        content = [{"type": "image"} for _ in pics] + [{"type": "text", "text": prompt}]
        messages = [{"role": "user", "content": content}]
        texts.append(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    images = [p for pics in pictures for p in pics]
    batch = processor(text=texts, images=images or None, padding=True, return_tensors="pt").to(model.device)
    logits = model(**batch).logits[:, -1, :].float()  # [B, V]
    probs = torch.softmax(logits, dim=-1)  # [B, V]
    p_yes, p_no = probs[:, yes].sum(-1), probs[:, no].sum(-1)  # [B]
    return (p_yes / (p_yes + p_no).clamp(min=1e-12)).tolist()


@reward("vlm_judge")
def vlm_judge(
    samples: list[Sample],
    trajectories: list[Trajectory],
    *,
    model: str,
    template: str | None = None,
    batch_size: int = 8,
    max_images: int = 4,
    max_frames: int = 8,
    max_pixels: int = 256 * 28 * 28,
    device: str = "cpu",
    dtype: str = "float32",
    extract: str = "auto",
    max_answer_chars: int = 2_000,
) -> list[float]:
    """A local VLM judges the answer given the sample's image(s)/frames, question and reference: P(Yes).

    kwargs: ``model`` (a from_pretrained directory, required), ``template`` (a Jinja file; default
    ``rewards/judge_prompt.jinja``), ``batch_size``, ``max_images`` / ``max_frames`` / ``max_pixels``
    (per picture), ``device``, ``dtype``. Columns: ``answer`` (the reference; first of a list),
    the question from the sample's last user turn.
    """
    judge, processor = load_judge(model, device, dtype)
    template_path = template or DEFAULT_TEMPLATE
    prompts, pictures = [], []
    for sample, trajectory in zip(samples, trajectories):
        refs = references(sample.answer)
        completion = as_text(trajectory.completion_text)[-max_answer_chars:]
        prompts.append(
            render_prompt(
                template_path,
                question=sample.prompt_text,
                reference=refs[0] if refs else "",
                answer=inert(final_answer(completion, extract, max_chars=max_answer_chars), processor.tokenizer),
                completion=inert(completion, processor.tokenizer),
            )
        )
        pictures.append(sample_visuals(sample, max_images, max_frames, max_pixels))
    scores: list[float] = []
    for start in range(0, len(prompts), batch_size):
        scores += judge_scores(
            judge, processor, prompts[start : start + batch_size], pictures[start : start + batch_size]
        )
    return scores
