"""CaRR, the citation-aware rubric reward: the share of a question's single-hop rubrics that the answer
fills in, that the evidence it cites supports, and that connect to the final answer.

Source: "Chaining the Evidence: Robust Reinforcement Learning for Deep Search Agents with Citation-Aware Rubric
Rewards" (THUDM/CaRR). The procedure is read from the authors' reward server
(``deepsearch_rm_with_rubrics/launch_server.py``: ``get_rubric_reward``, ``fill_rubric_with_entity_value``,
``extract_citation_content``, ``get_reward``); docs/methods/packs.md#carr_rubric.

    rubrics     c_1..c_m, single-hop statements over entities <E0> (the final answer), <E1>, <E2>, ...
    identify    v(E_k) = the identity the response states for E_k, or none
    fill        c_j(v): the placeholders replaced; a rubric with an entity left unidentified scores 0
    support     s_j = 1 when the filled c_j is supported by the content of the evidence the response cites
                (no cited evidence at all: the reward is 0)
    connect     BFS from E0 over supported rubrics: a rubric is reached when it holds a reached entity, and
                then all its entities are reached
    R_rubric    = |reached supported rubrics| / m
    reward      = (1 - a) R_outcome + a R_rubric        (a = 0.3 in the authors' C-GRPO runs)

The mix is the config's: give this reward weight ``a`` and the outcome reward (``anls``, ``accuracy`` ...)
weight ``1 - a``. The authors identify entities and judge support with an LLM; here both are deterministic
(marked differences in docs/methods/packs.md#carr_rubric): an entity is identified when the response names its gold
identity (column ``rubric_entities``; ``E0`` defaults to the reference answer), and a filled rubric is supported when
one cited evidence unit contains every entity name the rubric holds.

Evidence (``evidence``): ``"observations"``: the texts the environment returned in the trajectory (routing:
the passages of the knowledge bases the model chose to query); ``"pages"``: the texts (column ``page_texts``,
1-based) of the pages the answer cites in ``evidence_pages`` (DocSeeker).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from mmreason.parsing import as_text, clip
from mmreason.rewarding import column, reward
from mmreason.rewards.accuracy import references
from mmreason.rewards.evidence import cited_pages
from mmreason.types import Sample, Trajectory

ENTITY = re.compile(r"<(E\d+)>")
MAX_RUBRICS = 64
MAX_UNIT_CHARS = 20_000


def rubric_entities(rubric: str) -> list[str]:
    """The entity labels of a rubric, in order of first use (``"<E1> wrote <E0>"`` -> ``["E1", "E0"]``)."""
    return list(dict.fromkeys(ENTITY.findall(rubric)))


def fill_rubric(rubric: str, values: dict[str, str | None]) -> tuple[str, bool]:
    """(the rubric with every identified entity filled in, whether all of them were identified)."""
    filled, complete = rubric, True
    for label in rubric_entities(rubric):
        value = values.get(label)
        if value is None:
            complete = False
        else:
            filled = filled.replace(f"<{label}>", str(value))
    return filled, complete


def connected(rubrics: Sequence[str], supported: Sequence[bool], root: str = "E0") -> set[int]:
    """Indices of the supported rubrics reachable from ``root`` (BFS over shared entities)."""
    by_entity: dict[str, list[int]] = {}
    for j, (rubric, ok) in enumerate(zip(rubrics, supported)):
        if ok:
            for label in rubric_entities(rubric):
                by_entity.setdefault(label, []).append(j)
    reached_entities, reached, queue = {root}, set(), deque([root])
    while queue:
        for j in by_entity.get(queue.popleft(), []):
            reached.add(j)
            for label in rubric_entities(rubrics[j]):
                if label not in reached_entities:
                    reached_entities.add(label)
                    queue.append(label)
    return reached


def rubric_score(
    rubrics: Sequence[str], values: dict[str, str | None], supports: Callable[[str, list[str]], bool]
) -> tuple[float, float]:
    """(R_rubric, the share of rubrics supported) for entity identities ``values``; ``supports(filled, names)``
    judges one completely filled rubric given the names it holds."""
    if not rubrics:
        raise ValueError("no rubrics")
    ok = []
    for rubric in rubrics:
        filled, complete = fill_rubric(rubric, values)
        names = [str(values[label]) for label in rubric_entities(rubric) if values.get(label) is not None]
        ok.append(complete and bool(names) and supports(filled, names))
    return len(connected(rubrics, ok)) / len(rubrics), sum(ok) / len(rubrics)


def names_in(text: str, name: str) -> bool:
    """Whether ``name`` occurs in ``text`` as whole words, case- and space-insensitively."""
    words = [re.escape(w) for w in str(name).split()]
    return bool(words) and re.search(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)", text, re.IGNORECASE) is not None


def evidence_units(sample: Sample, trajectory: Trajectory, evidence: str) -> list[str]:
    """The cited evidence, one text per unit (a returned observation, or a cited page)."""
    if evidence == "observations":
        return [clip(as_text(t.text), MAX_UNIT_CHARS) for t in trajectory.turns if t.role == "observation"]
    if evidence == "pages":
        pages, texts = cited_pages(trajectory.completion_text) or set(), column(sample, "page_texts") or []
        return [
            clip(as_text(texts[k - 1]), MAX_UNIT_CHARS)
            for k in sorted(pages)
            if isinstance(texts, (list, tuple)) and 1 <= k <= len(texts)
        ]
    raise ValueError(f"carr_rubric: evidence must be 'observations' or 'pages', got {evidence!r}")


def identities(sample: Sample, response: str) -> dict[str, str | None]:
    """Entity label -> its gold identity when the response names it, else None (``E0``: the reference)."""
    gold: Any = column(sample, "rubric_entities") or {}
    if not isinstance(gold, dict):
        raise ValueError(f"sample {sample.id!r}: rubric_entities must be a dict of E<k> -> name")
    gold = {str(k): v for k, v in gold.items()}
    refs = references(sample.answer)
    if "E0" not in gold and refs:
        gold["E0"] = refs
    out: dict[str, str | None] = {}
    for label, value in gold.items():
        options = value if isinstance(value, (list, tuple)) else [value]
        out[label] = next((str(o) for o in options if o is not None and names_in(response, str(o))), None)
    return out


def _cooccur(units: list[str]) -> Callable[[str, list[str]], bool]:
    """Support test: some single evidence unit names every entity of the filled rubric."""
    return lambda filled, names: any(all(names_in(u, n) for n in names) for u in units)


@reward("carr_rubric", keys=("rubric", "supported"), diagnostics=("supported",))
def carr_rubric(
    samples: list[Sample], trajectories: list[Trajectory], *, evidence: str = "observations"
) -> dict[str, list[float | None]]:
    """CaRR citation-aware rubric reward: share of rubrics filled, supported by cited evidence and linked to E0.

    Columns: ``rubrics`` (list of statements over <E0> = the answer, <E1>, ...; none: does not apply),
    ``rubric_entities`` (dict E<k> -> gold name or list of names; E0 defaults to ``answer``), and for
    ``evidence="pages"`` ``page_texts`` (the document's page texts, 1-based). Sub-scores: ``rubric`` (the
    reward) and ``supported`` (logged: the share of rubrics the evidence supports, connected or not).
    Source: THUDM/CaRR ``launch_server.py::get_rubric_reward``; docs/methods/packs.md#carr_rubric.
    """
    rubric, supported = [], []
    for sample, trajectory in zip(samples, trajectories):
        rubrics = column(sample, "rubrics")
        if not rubrics:
            rubric.append(None)
            supported.append(None)
            continue
        if not isinstance(rubrics, (list, tuple)) or not all(isinstance(r, str) for r in rubrics):
            raise ValueError(f"sample {sample.id!r}: rubrics must be a list of strings")
        rubrics = list(rubrics)[:MAX_RUBRICS]
        units = evidence_units(sample, trajectory, evidence)
        if not units:  # CaRR: no cited evidence, reward 0
            rubric.append(0.0)
            supported.append(0.0)
            continue
        response = clip(as_text(trajectory.completion_text))
        values = identities(sample, response)
        r, s = rubric_score(rubrics, values, _cooccur(units))
        rubric.append(r)
        supported.append(s)
    return {"rubric": rubric, "supported": supported}
