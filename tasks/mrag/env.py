"""The environment of online multi-turn rollouts: each assistant turn is one R1-Router step.

``step(text)`` parses the step with the shared bounded parser (``parse_route_step``: tags only, nothing is
evaluated), runs the chosen retriever on the sub-question and returns the hits as the next observation: text
passages and table rows as text, text-image hits as the image (within ``image_max_pixels``) plus its caption.
The episode ends on an answer, on ``<ret>None</ret>``, or at ``max_steps`` turns. Retrieval cost is bounded per
step (``k`` hits within ``token_budget`` whitespace tokens) and per episode (``max_calls`` retriever calls). A
step that does not parse (told what is malformed: a nested tag, two steps in a turn, tags out of order, ...),
names a retriever that does not exist, or whose query the retriever refuses (too long,
empty) gets an error observation (``info["error"]``), never an exception.
"""

from __future__ import annotations

from mmreason.media import MediaError, load_image
from mmreason.parsing import as_text, parse_schema, tag_tokens
from mmreason.rollout.environment import Observation
from mmreason.tasks.mrag.kb import KnowledgeBaseError, KnowledgeBases, shared_index
from mmreason.tasks.mrag.route import KNOWLEDGE_BASES, ROUTE_TAGS, parse_route_step
from mmreason.tasks.mrag.steps import NONE
from mmreason.types import Sample

MAX_STEP_CHARS = 20_000  # a longer turn is not a step (route_step's limit)
FORMAT_HINT = (
    "Reply with <think>..</think><sub-question>..</sub-question><ret>Text Retriever | Text Image "
    "Retriever | Table Retriever | None</ret>, or <think>..</think><answer>..</answer>."
)


def malformed_step(text: str) -> str:
    """What is wrong with a step ``parse_route_step`` refused, first fault first: a nested or unclosed tag, more
    than one step in a turn, tags out of order, a missing tag, then (only when the step's shape is right) an
    unknown retriever name. Linear in the text (one pass over its tags)."""
    tokens = tag_tokens(text, ROUTE_TAGS)
    counts = {name: sum(1 for t in tokens if t[2] == name and not t[3]) for name in ROUTE_TAGS}
    open_tag = None
    for _, _, name, closing in tokens:
        if not closing and open_tag is not None:
            return f"<{name}> is inside <{open_tag}>; close </{open_tag}> first"
        if closing and name != open_tag:
            return f"</{name}> closes no open <{name}>"
        open_tag = None if closing else name
    if open_tag is not None:
        return f"<{open_tag}> is never closed"
    if counts["ret"] > 1 or counts["sub-question"] > 1 or counts["answer"] > 1:
        return (
            f"one step per turn: this turn holds {counts['sub-question']} <sub-question> and {counts['ret']} <ret> "
            f"(and {counts['answer']} <answer>)"
        )
    if counts["answer"] and (counts["ret"] or counts["sub-question"]):
        return "a step either retrieves (<sub-question> + <ret>) or answers (<answer>), not both"
    order = [name for _, _, name, closing in tokens if not closing]
    if counts["answer"]:
        wanted = ["think", "answer"]
    else:
        wanted = ["think", "sub-question", "ret"]
    missing = [f"<{n}>" for n in wanted if n not in order]
    if missing:
        return "the step has no " + " and no ".join(missing)
    if order != wanted:
        return f"tags out of order ({', '.join(f'<{n}>' for n in order)}); a step is " + "".join(
            f"<{n}>..</{n}>" for n in wanted
        )
    if not counts["answer"]:
        bodies = parse_schema(text.strip(), wanted, known=ROUTE_TAGS)
        if bodies is not None:
            return f"unknown retriever {bodies[2].strip()[:80]!r} (name exactly one of {', '.join(KNOWLEDGE_BASES)})"
    return "text outside the tags: a step is only its tags, with nothing before, between or after them"


class MragEnv:
    stop_strings = ("</ret>", "</answer>")

    def __init__(
        self,
        kb: KnowledgeBases,
        *,
        k: int = 2,
        token_budget: int = 120,
        max_steps: int = 4,
        max_calls: int = 3,
        image_max_pixels: int = 56 * 56,
    ):
        self.kb, self.k, self.token_budget = kb, k, token_budget
        self.max_steps, self.max_calls, self.image_max_pixels = max_steps, max_calls, image_max_pixels
        self.steps = self.calls = 0

    def reset(self, sample: Sample) -> None:
        self.steps = self.calls = 0

    def _error(self, message: str, info: dict) -> Observation:
        info["error"] = message
        return Observation(text=f"Error: {message}. {FORMAT_HINT}", info=info, done=self.steps >= self.max_steps)

    def step(self, action_text: str) -> Observation:
        self.steps += 1
        text = as_text(action_text)
        info: dict = {"step": self.steps}
        if len(text) > MAX_STEP_CHARS:
            return self._error(f"a step of {len(text)} characters is over the limit of {MAX_STEP_CHARS}", info)
        parsed = parse_route_step(text.strip())
        if parsed is None:
            reason = malformed_step(text)
            message = reason if reason.startswith("unknown retriever") else f"the step does not parse: {reason}"
            return self._error(message, info)
        if parsed.answer is not None:
            info["answer"] = parsed.answer[:500]
            return Observation(text="", info=info, done=True)
        info["retriever"], info["sub_question"] = parsed.knowledge_base, parsed.sub_question[:500]
        if parsed.knowledge_base == NONE:
            return Observation(text="", info=info, done=True)
        if self.calls >= self.max_calls:
            return self._error(f"the retrieval budget of {self.max_calls} calls is spent; answer now", info)
        self.calls += 1
        info["call"] = self.calls
        try:
            hits = self.kb.search(parsed.knowledge_base, parsed.sub_question, self.k, self.token_budget)
        except KnowledgeBaseError as err:
            return self._error(str(err), info)
        info["hits"] = [h.item_id for h in hits]
        return self._observation(parsed.knowledge_base, hits, info)

    def _observation(self, retriever: str, hits, info: dict) -> Observation:
        lines, images = [f"{retriever} results:"], []
        for n, hit in enumerate(hits, start=1):
            if hit.image:
                try:
                    images.append(load_image(hit.image, max_pixels=self.image_max_pixels))
                except MediaError as err:
                    info.setdefault("image_errors", []).append(str(err)[:200])
            lines.append(f"{n}. {hit.title}: {hit.text}")
        if not hits:
            lines.append("nothing found")
        return Observation(text="\n".join(lines), images=images, info=info, done=self.steps >= self.max_steps)


def mrag_environment() -> MragEnv:
    """A fresh environment over the default cached index (loaded once per process); a missing or corrupt
    index raises ``KnowledgeBaseError`` saying how to build it."""
    return MragEnv(shared_index())
