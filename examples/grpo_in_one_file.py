"""GRPO in one file: the main job's GRPO (configs/quickstart.yaml) from draw to optimizer step, top to bottom.

    mmreason tiny-model runs/tiny-model && mmreason sft configs/quickstart_sft.yaml    # the warm-up checkpoint
    python examples/grpo_in_one_file.py runs/quickstart-sft/checkpoint-30/model

Each step: draw prompts -> generate G completions each -> reward them -> group-normalised advantages ->
clipped-surrogate loss -> gradient clip and AdamW step. The numbers are the trainer's: tests/test_grpo_in_one_file.py
runs this file beside ``mmreason.train.step.train_step`` and asserts equal rewards, advantages, losses, gradient
norms and weight updates over 3 steps. Read this first, then mmreason/train/step.py, loop.py and update.py.

How it departs from textbook GRPO (DeepSeekMath, arXiv 2402.03300), as the trainer does by default:

1. On-policy: one update per batch of rollouts, so the ratio exp(logp - logp_old) is 1 and the clip never
   acts; the surrogate is written out anyway (it matters as soon as num_iterations > 1). The loss's value is
   then -mean(A), about 0 in every step: its gradient, not its value, moves the policy.
2. No KL penalty and no reference model (beta = 0, as DAPO and Dr. GRPO recommend).
3. Advantages use the population std (ddof 0) + 1e-6, and a group whose rewards are all equal gets exactly 0.
4. Each rollout samples from its own seeded stream: seeds derive from (run seed, step, group, row), so the
   samples do not depend on batch size, batch order or the global RNG.
5. Log-probs are taken at the sampling temperature with the never-sampled vision tokens at -inf, so they are
   the log-probs of the distribution the completions were drawn from.
6. The loss is the mean over completions of each completion's mean token loss (TRL's loss_type "grpo").
7. The gradient's norm is clipped at 1 before AdamW (betas 0.9 / 0.99, no weight decay, constant rate).

What it reuses from the library, where writing it again would be noise: the tiny model loader
(``models.loading``), the shapes pack's data and its reward (``TASKS``, ``REWARDS``), the prompt builder
(chat template + image -> input ids and pixel tensors, ``rollout.prompts.build_prompt``) and the decoding loop
(HF ``generate`` with one seeded inverse-CDF draw per row, ``rollout.generate.sample_rows``). Around the same
step the trainer adds what a real run needs: several processes, vLLM, mini-batches, checkpoints, eval, faults.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mmreason.models.loading import ModelConfig, load_model, load_processor
from mmreason.rewarding import REWARDS
from mmreason.rollout.generate import GenerationSettings, eos_token_ids, sample_rows, suppressed_token_ids
from mmreason.rollout.prompts import PromptInputs, build_prompt
from mmreason.taskpack import TASKS

# ---- hyperparameters (configs/quickstart.yaml's) ----------------------------------------------------

SEED = 0
STEPS = 60
PROMPTS_PER_STEP = 16  # N / G prompts drawn each step
GROUP_SIZE = 8  # G completions per prompt
MAX_NEW_TOKENS = 6
TEMPERATURE = 1.0
MAX_PROMPT_LENGTH = 512  # text + image tokens; the shapes prompts are far shorter
REWARD_SPECS = TASKS.get("shapes").rewards  # the pack's: exact match of the colour, weight 1
STD_EPS = 1e-6  # advantage = (r - mean) / (std + STD_EPS)
CLIP_EPS = 0.2  # ratio clipped to [1 - CLIP_EPS, 1 + CLIP_EPS]
LEARNING_RATE = 1e-3
BETAS = (0.9, 0.99)  # AdamW's moment decays
ADAM_EPS = 1e-8
WEIGHT_DECAY = 0.0
MAX_GRAD_NORM = 1.0


@dataclass
class Rollout:
    """One completion: its prompt, its tokens up to and including the first end token, and its text (what the
    reward reads)."""

    prompt: PromptInputs
    completion_ids: torch.Tensor  # [L] long
    completion_text: str


def load_policy(model_dir: str):
    """The policy in fp32 (the hand-written AdamW below steps the weights themselves) and its processor."""
    model = load_model(ModelConfig(name_or_path=str(model_dir), dtype="float32"))
    return model.to("cuda" if torch.cuda.is_available() else "cpu"), load_processor(str(model_dir))


def train(model, processor, dataset, steps: int = STEPS) -> Iterator[dict[str, float]]:
    """Train ``model`` in place for ``steps`` GRPO steps on ``dataset``; yield each step's metrics."""
    params = [p for p in model.parameters() if p.requires_grad]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]  # AdamW's m and v
    order = prompt_order(len(dataset))
    for step in range(1, steps + 1):
        # 1. draw: the next prompts of a seeded permutation; slot k of the step is group k
        samples = [dataset[next(order)] for _ in range(PROMPTS_PER_STEP)]
        prompts = [build_prompt(processor, s, max_prompt_length=MAX_PROMPT_LENGTH) for s in samples]
        # 2. generate: G completions per prompt, row i * G + r is prompt i's r-th
        rollouts = generate(model, processor, prompts, step)
        # 3. reward: one scalar per completion
        rewards = score([s for s in samples for _ in range(GROUP_SIZE)], rollouts)  # [N]
        # 4. advantages: each reward against its own group's
        advantages = group_advantages(rewards)  # [N]
        # 5. loss: the clipped surrogate of the completion tokens
        model.train()
        logp, mask = completion_logprobs(model, processor, rollouts)  # [N, T] each
        loss = clipped_surrogate(logp, logp.detach(), advantages.to(logp.device), mask)
        loss.backward()
        # 6. step: clip the gradient's norm, then AdamW
        grad_norm = clip_grad_norm(params, MAX_GRAD_NORM)
        adamw_step(params, moments, step)
        model.zero_grad(set_to_none=True)
        yield {
            "reward/mean": float(rewards.mean()),
            "reward/std": float(rewards.std(unbiased=False)),
            "advantage/abs_mean": float(advantages.abs().mean()),
            "completion/length_mean": float(mask.sum(-1).mean()),
            "loss": float(loss.detach()),
            "grad_norm": float(grad_norm),
        }


# ---- 1. draw ------------------------------------------------------------------------------------------


def prompt_order(size: int) -> Iterator[int]:
    """Dataset indices, epoch after epoch, each epoch a permutation seeded by (SEED, epoch): the trainer's
    uniform sampler (mmreason/sampling/uniform.py)."""
    for epoch in itertools.count():
        yield from torch.randperm(size, generator=torch.Generator().manual_seed(SEED * 1_000_003 + epoch)).tolist()


# ---- 2. generate --------------------------------------------------------------------------------------


def seed_of(text: str) -> int:
    """63 bits of the SHA-256 of ``text``: a seed that depends on the text alone."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def generate(model, processor, prompts: list[PromptInputs], step: int) -> list[Rollout]:
    """G completions of each prompt in one batched ``generate`` call, row r of group k drawn from its own
    stream seeded by (SEED, step, k, sample id, r): mmreason/rollout/generate.py and row_sampling.py."""
    groups = [seed_of(f"{SEED}/{step}/{k}:{p.sample.id}/0") for k, p in enumerate(prompts)]  # turn 0
    seeds = [seed_of(f"{g}/row/{r}") for g in groups for r in range(GROUP_SIZE)]
    settings = GenerationSettings(MAX_NEW_TOKENS, TEMPERATURE)
    model.eval()
    new = sample_rows(model, processor.tokenizer, prompts, GROUP_SIZE, settings, seeds=seeds)  # [N, L] right-padded
    ends = torch.isin(new, torch.tensor(eos_token_ids(processor.tokenizer)))  # [N, L] end tokens (pad among them)
    rollouts = []
    for i, row in enumerate(new):
        length = int(ends[i].int().argmax()) + 1 if ends[i].any() else row.numel()  # keep the first end token
        text = processor.tokenizer.decode(row[:length], skip_special_tokens=True)
        rollouts.append(Rollout(prompts[i // GROUP_SIZE], row[:length], text))
    return rollouts


# ---- 3. reward ----------------------------------------------------------------------------------------


def score(samples, rollouts: list[Rollout]) -> torch.Tensor:
    """[N] the weighted sum of the rewards in REWARD_SPECS; each reward reads the sample's answer and the
    rollout's ``completion_text`` (rewards/accuracy.py)."""
    total = torch.zeros(len(rollouts))
    for spec in REWARD_SPECS:
        values = REWARDS.get(spec["name"])(samples, rollouts, **spec.get("kwargs", {}))
        total += spec.get("weight", 1.0) * torch.tensor(values, dtype=torch.float32)
    return total


# ---- 4. advantages ------------------------------------------------------------------------------------


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """[N] -> [N]: A = (r - mean_g r) / (std_g r + STD_EPS) within each group of G; 0 in a group of equal
    rewards (a rounding residue of its mean would be blown up by the division otherwise)."""
    r = rewards.view(-1, GROUP_SIZE)  # [N / G, G]
    mean = r.mean(-1, keepdim=True)  # [N / G, 1]
    std = r.std(-1, unbiased=False, keepdim=True)  # [N / G, 1] population std
    same = (r == r[:, :1]).all(-1, keepdim=True)  # [N / G, 1]
    return torch.where(same, torch.zeros_like(r), (r - mean) / (std + STD_EPS)).view(-1)


# ---- 5. loss ------------------------------------------------------------------------------------------


def completion_logprobs(model, processor, rollouts: list[Rollout]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs [N, T] of the completion tokens under the policy as it sampled (0 elsewhere), and the mask
    [N, T] that is 1 on them: one forward of the prompts and completions, right-padded."""
    device, pad = next(model.parameters()).device, processor.tokenizer.pad_token_id
    sequences = [torch.cat([r.prompt.input_ids, r.completion_ids]) for r in rollouts]
    n, width = len(rollouts), max(s.numel() for s in sequences)
    ids = torch.full((n, width), pad, dtype=torch.long)  # [N, T + 1]
    attention = torch.zeros_like(ids)  # [N, T + 1] 0 on padding
    types = torch.zeros_like(ids)  # [N, T + 1] 1 on image tokens (Qwen's M-RoPE positions)
    mask = torch.zeros(n, width)  # [N, T + 1] 1 on completion tokens
    for i, (r, s) in enumerate(zip(rollouts, sequences)):
        ids[i, : s.numel()], attention[i, : s.numel()] = s, 1
        types[i, : r.prompt.length] = r.prompt.mm_token_type_ids
        mask[i, r.prompt.length : s.numel()] = 1
    visual = {k: torch.cat([r.prompt.visual[k] for r in rollouts]).to(device) for k in rollouts[0].prompt.visual}
    ids, attention, types = ids.to(device), attention.to(device), types.to(device)
    out = model(input_ids=ids, attention_mask=attention, mm_token_type_ids=types, **visual, use_cache=False)
    logits = out.logits[:, :-1].float()  # [N, T, V]: position t predicts token t + 1
    never = torch.tensor(suppressed_token_ids(processor.tokenizer), device=device)
    logits = logits.index_fill(-1, never, float("-inf")) / TEMPERATURE  # the sampler's distribution
    logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # [N, T]; -inf at image tokens
    mask = mask[:, 1:].to(device)
    return logp.masked_fill(mask == 0, 0.0), mask  # 0 off the completion


def clipped_surrogate(logp, old_logp, advantages, mask) -> torch.Tensor:
    """-min(ratio A, clip(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) A) per token [N, T], averaged over each completion's
    tokens, then over completions (rl/losses/clipped.py and aggregation.py)."""
    ratio = torch.exp((logp - old_logp).clamp(-20, 20))  # [N, T]
    a = advantages[:, None]  # [N, 1]
    per_token = -torch.min(ratio * a, ratio.clamp(1 - CLIP_EPS, 1 + CLIP_EPS) * a)  # [N, T]
    per_completion = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [N]
    return per_completion.mean()


# ---- 6. step ------------------------------------------------------------------------------------------


@torch.no_grad()
def clip_grad_norm(params, max_norm: float) -> torch.Tensor:
    """Scale every gradient by min(1, max_norm / (|g| + 1e-6)), |g| the norm of all of them together (as
    torch.nn.utils.clip_grad_norm_); returns |g| before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    for g in grads:
        g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


@torch.no_grad()
def adamw_step(params, moments, t: int) -> None:
    """One AdamW step (Loshchilov & Hutter, arXiv 1711.05101), as torch.optim.AdamW: decoupled weight decay,
    then the bias-corrected first moment over the root of the bias-corrected second."""
    beta1, beta2 = BETAS
    for p, (m, v) in zip(params, moments):
        if p.grad is None:
            continue
        p.mul_(1 - LEARNING_RATE * WEIGHT_DECAY)
        m.lerp_(p.grad, 1 - beta1)  # m = beta1 m + (1 - beta1) g
        v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)  # v = beta2 v + (1 - beta2) g^2
        denom = (v.sqrt() / (1 - beta2**t) ** 0.5).add_(ADAM_EPS)
        p.addcdiv_(m, denom, value=-LEARNING_RATE / (1 - beta1**t))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/grpo_in_one_file.py MODEL_DIR   (a checkpoint's model folder)")
    policy, processor = load_policy(sys.argv[1])
    train_set = TASKS.get("shapes").load(None, "train")
    for step, metrics in enumerate(train(policy, processor, train_set), start=1):
        print(f"step {step:3d} | " + " | ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
