"""DocSeeker: long-document QA with the Analysis -> Localization -> Reasoning format, an evidence-aware
reward and Evidence-Guided Resolution Allocation (EGRA). Two stages: SFT on ALR traces, then GRPO.

Reward: ``0.1 docseeker_format + 0.3 page_fbeta + 0.6 anls`` with ``reward_missing: renormalize`` (a
"no specific page" sample gets ``(0.1 R_fmt + 0.6 R_ans) / 0.7``). Paper: "DocSeeker: Structured Visual
Reasoning with Evidence Grounding for Long Document Understanding" (arXiv 2604.12812);
docs/methods/packs.md#docseeker. Recipes: configs/docseeker/docseeker_sft.yaml,
configs/docseeker/docseeker_grpo.yaml (and their *_tiny variants). The ``mmlongbench_doc`` pack
(``tasks/mmlongbench_doc/``) scores the same data by MMLongBench-Doc's rules.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.docseeker.alr import INSTRUCTION, docseeker_sft_target
from mmreason.tasks.docseeker.baseline import baseline_rule
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.egra import docseeker_transform
from mmreason.tasks.docseeker.rewards import REWARDS
from mmreason.tasks.docseeker.scoring import docseeker_metrics

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
