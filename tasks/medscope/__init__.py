"""MedScope: clinical long-video reasoning with coarse-to-fine tool calls ("think with videos"), trained with
GA-GRPO (answer + tool grounding + format rewards, advantages weighted by each rollout's evidence fidelity).

The model sees the question and a sparse global view of the whole video, calls ``crop_video(start, end)`` and
``get_frame(t)`` in the environment (``env.py``: schema-checked, bounded, never executed as code), and answers
with the evidence span. Data: user rows (``data.py``: ``evidence_windows``, ``task_type`` qa /
temporal_grounding / grounded_qa), generated minutes-long procedure videos with short events at known times
(``synth.py``), or the real echocardiography cine of pydicom-data with measured answers (``echo.py``).
Rewards: the answer and format rules (``scoring.py``) and the pack's ``tool_grounding`` (``rewards.py``).
Two stages: SFT on generated tool trajectories (``trajectories.py``), then GA-GRPO. Paper: "MedScope:
Incentivizing 'Think with Videos' for Clinical Reasoning via Coarse-to-Fine Tool Calling" (arXiv 2602.13332);
docs/methods/packs.md#medscope. Recipes: configs/medscope/medscope_sft.yaml, configs/medscope/medscope_ga_grpo.yaml (+
``_tiny``).
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.medscope.baseline import baseline_rule
from mmreason.tasks.medscope.data import medscope_load
from mmreason.tasks.medscope.env import medscope_environment
from mmreason.tasks.medscope.rewards import REWARDS
from mmreason.tasks.medscope.scoring import HIGHER_IS_BETTER, METRICS

PACK = register_task(
    TaskPack(
        name="medscope",
        description="clinical long-video QA / temporal grounding with crop_video / get_frame tool calls, GA-GRPO",
        load=medscope_load,
        rewards=REWARDS,
        metrics=dict(METRICS),
        higher_is_better=HIGHER_IS_BETTER,
        make_environment=medscope_environment,
        max_turns=5,  # eval episodes: up to 4 tool calls (ToolLimits.max_calls) and the answer
        prompt_template="{question}\\n{options}\\n{global-view timestamps}\\n{tool hint}\\n{answer instruction}",
        baseline=baseline_rule,
    )
)
