"""The environment of online multi-turn rollouts: each assistant turn is one R1-Router step.

``step(text)`` parses the step with the shared bounded parser (``parse_route_step``: tags only, nothing is
evaluated), runs the chosen retriever on the sub-question and returns the hits as the next observation: text
passages and table rows as text, text-image hits as the image (within ``image_max_pixels``) plus its caption.
The episode ends on an answer, on ``<ret>None</ret>``, or at ``max_steps`` turns. Retrieval cost is bounded per
step (``k`` hits within ``token_budget`` whitespace tokens) and per episode (``max_calls`` retriever calls). A
step that does not parse, names a retriever that does not exist, or whose query the retriever refuses (too long,
empty) gets an error observation (``info["error"]``), never an exception.
"""

from __future__ import annotations

from mmreason.media import MediaError, load_image
from mmreason.parsing import as_text, last_tag_body
from mmreason.rewards.format import parse_route_step
from mmreason.rollout.environment import Observation
from mmreason.tasks.mrag.kb import KnowledgeBaseError, KnowledgeBases, shared_index
from mmreason.tasks.mrag.steps import NONE
from mmreason.types import Sample

MAX_STEP_CHARS = 20_000  # a longer turn is not a step (route_step's limit)
FORMAT_HINT = ("Reply with <think>..</think><sub-question>..</sub-question><ret>Text Retriever | Text Image "
               "Retriever | Table Retriever | None</ret>, or <think>..</think><answer>..</answer>.")


class MragEnv:
    stop_strings = ("</ret>", "</answer>")

    def __init__(self, kb: KnowledgeBases, *, k: int = 2, token_budget: int = 120, max_steps: int = 4,
                 max_calls: int = 3, image_max_pixels: int = 56 * 56):
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
            named = last_tag_body(text, "ret")
            if named is not None and named.strip():
                return self._error(f"unknown retriever {named.strip()[:80]!r} (or several named)", info)
            return self._error("the step does not parse", info)
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
