"""DocSeeker: long-document QA with the Analysis -> Localization -> Reasoning format, an evidence-aware
reward and Evidence-Guided Resolution Allocation (EGRA). Two stages: SFT on ALR traces, then GRPO.

Reward: ``0.1 docseeker_format + 0.3 page_fbeta + 0.6 anls`` with ``reward_missing: renormalize`` (a
"no specific page" sample gets ``(0.1 R_fmt + 0.6 R_ans) / 0.7``). Paper: "DocSeeker: Structured Visual
Reasoning with Evidence Grounding for Long Document Understanding" (arXiv 2604.12812); docs/algorithms.md
§1. Recipes: configs/docseeker/docseeker_sft.yaml, configs/docseeker/docseeker_grpo.yaml (and their *_tiny variants).

A second pack, ``mmlongbench_doc``, is the same data, prompt and rewards scored by MMLongBench-Doc's
published rules (``mmlb_score.py``, ``mmlb_metrics.py``): ``mmreason eval --tasks
mmlongbench_doc:PATH/samples.json``; docs/tasks/mmlongbench.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.docseeker.alr import INSTRUCTION, docseeker_sft_target
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.egra import docseeker_transform
from mmreason.tasks.docseeker.learncheck import baseline_rule
from mmreason.tasks.docseeker.metrics import docseeker_metrics
from mmreason.tasks.docseeker.mmlb_metrics import DERIVED, RESULTS_NOTE, mmlongbench_metrics

# The paper's weights (EviGRPO_reward.py); run configs may override them.
REWARDS = [
    {"name": "docseeker_format", "weight": 0.1},
    {"name": "page_fbeta", "weight": 0.3, "kwargs": {"beta": 2.0, "index_base": 1}},
    # ANLS keeps the DocVQA 0.5 threshold (the paper trains with 0): without it a fragment that half-matches
    # every answer earns partial credit, a reward a policy can max without reading the document.
    {"name": "anls", "weight": 0.6, "kwargs": {"threshold": 0.5, "extract": "answer_dict"}},
]

PACK = register_task(
    TaskPack(
        name="docseeker",
        description="long-document QA: ALR format, page F2 + ANLS reward, EGRA page budgets (synthetic or your PDFs)",
        load=docseeker_load,
        rewards=REWARDS,
        metrics=docseeker_metrics(),
        prompt_template=INSTRUCTION,
        sft_target=docseeker_sft_target,
        transform=docseeker_transform,
        baseline=baseline_rule,
    )
)

MMLONGBENCH = register_task(
    TaskPack(
        name="mmlongbench_doc",
        description="MMLongBench-Doc's samples.json as published, scored by its rules (accuracy, F1, breakdowns); "
        "DocSeeker's prompt and rewards",
        load=docseeker_load,
        rewards=REWARDS,
        metrics=mmlongbench_metrics(),
        derived=DERIVED,
        results_note=RESULTS_NOTE,
        prompt_template=INSTRUCTION,
        sft_target=docseeker_sft_target,
        transform=docseeker_transform,
    )
)
