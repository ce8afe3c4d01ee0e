"""Multimodal RAG routing (R1-Router): answer a multi-hop question step by step, each step one sub-question
routed to one knowledge base (Text Retriever, Text Image Retriever, Table Retriever or None), then the answer.

Offline Step-GRPO, the paper's way: every gold step becomes its own prompt with the gold history so far,
``step_index = k`` and its own group (``algorithm.estimator: step_grpo``); ``route_step`` scores retrieval
steps by 0.5 sub-question similarity + 0.5 single-KB match and final steps by answer recall. Data: user rows
(``data.py``) or questions generated from the local knowledge bases. Paper: "R1-Router: Learning to Route
Queries Across Knowledge Bases for Step-wise Retrieval-Augmented Reasoning" (Peng et al.);
docs/methods/packs.md#r1-router. Recipe: configs/mrag/mrag_step_grpo_tiny.yaml.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.mrag.baseline import baseline_rule
from mmreason.tasks.mrag.data import mrag_load
from mmreason.tasks.mrag.env import mrag_environment
from mmreason.tasks.mrag.rewards import REWARDS
from mmreason.tasks.mrag.scoring import HIGHER_IS_BETTER, mrag_metrics
from mmreason.tasks.mrag.steps import INSTRUCTION

PACK = register_task(
    TaskPack(
        name="mrag",
        description="multimodal RAG routing (R1-Router): step-wise sub-questions routed to text / image / table "
        "knowledge bases, Step-GRPO on unrolled gold steps",
        load=mrag_load,
        rewards=REWARDS,
        metrics=mrag_metrics(),
        higher_is_better=HIGHER_IS_BETTER,
        make_environment=mrag_environment,
        prompt_template=INSTRUCTION,
        baseline=baseline_rule,
    )
)
