"""Learning: every estimator x every aggregation raises the expected reward of a toy softmax policy.

The policy is tabular and autoregressive over a fixed set of token sequences (a prefix tree, EOS = 0): at
each prefix a softmax over the allowed next tokens, so per-token log-probs are real and lengths differ.
Two prompts, each with its own parameters and a fixed [sequence, component] reward table.
"""

import pytest
import torch

from mmreason.rl import AGGREGATIONS, ESTIMATORS, advantages, policy_loss

SEQUENCES = [[1, 0], [2, 0], [1, 2, 0], [2, 3, 1, 0], [3, 0], [3, 3, 3, 0]]
VOCAB, T = 4, 4
# [prompt, sequence, component]: accuracy and format; the best sequence differs per prompt and is not
# the initial favourite
REWARD = torch.tensor(
    [
        [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]],
        [[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.5, 1.0]],
    ]
)
WEIGHTS = torch.tensor([1.0, 0.5])
FIDELITY = torch.tensor([[0.2, 0.5, 0.1, 0.9, 0.4, 0.0], [0.3, 0.8, 0.6, 0.1, 0.2, 0.5]])
PROMPTS, G = 2, 5  # G + 1 = 5 is odd, as MC-GRPO wants


def build_tree():
    """Prefix index of every (sequence, position), allowed-token mask per prefix, token ids, mask."""
    prefixes: dict[tuple, int] = {}
    node = torch.zeros(len(SEQUENCES), T, dtype=torch.long)
    for s, seq in enumerate(SEQUENCES):
        for t in range(len(seq)):
            node[s, t] = prefixes.setdefault(tuple(seq[:t]), len(prefixes))
    allowed = torch.zeros(len(prefixes), VOCAB, dtype=torch.bool)
    tokens = torch.zeros(len(SEQUENCES), T, dtype=torch.long)
    mask = torch.zeros(len(SEQUENCES), T)
    for s, seq in enumerate(SEQUENCES):
        for t, tok in enumerate(seq):
            allowed[node[s, t], tok] = True
            tokens[s, t], mask[s, t] = tok, 1.0
    return node, allowed, tokens, mask


NODE, ALLOWED, TOKENS, MASK = build_tree()


def token_logprobs(theta):
    """``[P, S, T]`` per-token log-probs of every sequence under ``theta [P, nodes, V]``."""
    logits = theta.masked_fill(~ALLOWED, float("-inf"))
    logp = torch.log_softmax(logits, -1)  # [P, nodes, V]
    per_token = logp[:, NODE, TOKENS]  # [P, S, T]
    return torch.where(MASK > 0, per_token, torch.zeros_like(per_token))


def expected_reward(theta):
    seq_p = token_logprobs(theta).sum(-1).exp()  # [P, S]
    return ((seq_p * (REWARD * WEIGHTS).sum(-1)).sum(-1)).mean().item()


def options_for(name, picks):
    prompt = torch.arange(PROMPTS).repeat_interleave(G)
    if name == "ga_grpo":
        return {"fidelity": FIDELITY[prompt, picks]}
    if name == "step_grpo":
        return {"step_index": torch.zeros(PROMPTS * G, dtype=torch.long)}
    return {}


def train(estimator, aggregation, steps=200, loss="clipped", seed=0, loss_options=None, estimator_options=None):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.zeros(PROMPTS, ALLOWED.shape[0], VOCAB, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.05)
    start = expected_reward(theta)
    prompt = torch.arange(PROMPTS).repeat_interleave(G)  # [N] group ids
    for _ in range(steps):
        lp_all = token_logprobs(theta)  # [P, S, T]
        with torch.no_grad():
            picks = torch.multinomial(lp_all.sum(-1).exp(), G, replacement=True, generator=gen).reshape(-1)  # [N]
        rewards = REWARD[prompt, picks]  # [N, K]
        result = advantages(
            estimator, rewards, prompt, weights=WEIGHTS, **options_for(estimator, picks), **(estimator_options or {})
        )
        lp = lp_all[prompt, picks]  # [N, T]
        mask = MASK[picks]
        if loss == "clipped":
            out = policy_loss(
                "clipped", lp, lp.detach(), result.advantages, mask, aggregation=aggregation, seq_mask=result.loss_mask
            )
        elif loss == "reg_grpo":
            out = policy_loss(
                "reg_grpo", lp, lp.detach(), result.advantages, mask, group_ids=prompt, seq_mask=result.loss_mask
            )
        else:
            out = policy_loss(
                loss,
                lp,
                lp.detach(),
                result.advantages,
                mask,
                group_ids=prompt,
                seq_mask=result.loss_mask,
                **(loss_options or {}),
            )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return start, expected_reward(theta)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_every_estimator_is_trained_here():
    assert len(ESTIMATORS.names()) >= 10


@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS.names()))
@pytest.mark.parametrize(
    "estimator",
    ["grpo", "dr_grpo", "rloo", "mc_grpo", "g2rpo", "gdpo", "dvao", "corr_grpo", "ga_grpo", "step_grpo"],
)
def test_updates_raise_expected_reward(estimator, aggregation):
    start, end = train(estimator, aggregation)
    assert end > start + 0.8, (start, end)  # from 0.5 towards the optimum 1.5


# The GRPO-family methods (docs/methods/estimators.md, docs/methods/losses.md) on the same toy policy: (estimator, its
# options, loss, loss options).
FAMILY = [
    ("dgpo", {}, "clipped", {}),
    ("opmd", {"baseline": "logavgexp"}, "opmd", {}),
    ("asymre", {}, "opmd", {}),
    ("disco", {"threshold": 1.0}, "disco", {"tau": 10.0}),
    ("grpo", {}, "holder", {"level": "sequence"}),
    ("grpo", {}, "holder", {"level": "token", "p_schedule": "constant", "p": -1.0}),
    ("grpo", {}, "gbpo", {"temperature": 1e-4, "epsilon": 0.3}),
]


@pytest.mark.parametrize(
    "estimator, estimator_options, loss, loss_options", FAMILY, ids=[f"{f[0]}+{f[2]}-{i}" for i, f in enumerate(FAMILY)]
)
def test_family_methods_raise_expected_reward(estimator, estimator_options, loss, loss_options):
    start, end = train(
        estimator, "seq_mean_token_mean", loss=loss, loss_options=loss_options, estimator_options=estimator_options
    )
    assert end > start + 0.8, (start, end)


def test_reg_grpo_raises_expected_reward():
    start, end = train("grpo", "seq_mean_token_mean", loss="reg_grpo")
    assert end > start + 0.8, (start, end)


def test_reg_grpo_first_step_is_parallel_to_unclipped_grpo_gradient():
    torch.manual_seed(0)
    theta = torch.randn(PROMPTS, ALLOWED.shape[0], VOCAB, requires_grad=True)
    prompt = torch.arange(PROMPTS).repeat_interleave(4)
    picks = torch.tensor([0, 2, 3, 4, 1, 5, 2, 0])
    target = advantages("grpo", REWARD[prompt, picks], prompt, weights=WEIGHTS).advantages
    lp = token_logprobs(theta)[prompt, picks]  # [N, T]
    mask = MASK[picks]
    reg = policy_loss("reg_grpo", lp, lp.detach(), target, mask, group_ids=prompt).loss
    (g_reg,) = torch.autograd.grad(reg, theta, retain_graph=True)
    grpo = -(target[:, None] * lp * mask).sum() / len(picks)  # unclipped, sequence-sum GRPO
    (g_grpo,) = torch.autograd.grad(grpo, theta)
    cosine = torch.nn.functional.cosine_similarity(g_reg.flatten(), g_grpo.flatten(), dim=0)
    assert cosine.item() > 0.99
