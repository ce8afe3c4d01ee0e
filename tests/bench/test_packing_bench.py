"""`mmreason bench packing`'s workload: long-tailed completions, and the decoder tokens each path runs."""

from __future__ import annotations

from mmreason.bench.packing import Mix, completion_lengths, decoder_tokens, rollouts
from mmreason.bench.update_throughput import _QWEN_IDS
from mmreason.train.minibatches import length_sorted_minibatches


def test_the_mix_is_long_tailed_and_packing_runs_no_padding():
    mix = Mix(prompts=2, num_generations=4, max_completion=128, at_limit=2, mini_batch_size=4)
    lengths = completion_lengths(mix)
    assert sorted(lengths)[-2:] == [128, 128] and max(sorted(lengths)[:-2]) <= 32  # a few at the limit
    ids = {name: 2032 + i for i, name in enumerate(_QWEN_IDS)}
    trajs = rollouts(mix, ids)
    assert [t.completion_length for t in trajs] == lengths
    cut = length_sorted_minibatches(list(range(len(trajs))), trajs, mix.mini_batch_size)
    minibatches = [[trajs[i] for i in rows] for rows in cut]
    real = sum(t.token_ids.numel() for t in trajs)
    assert decoder_tokens("packed", minibatches) == real
    # padded: every row of a mini-batch as long as its longest
    padded = sum(len(m) * max(t.token_ids.numel() for t in m) for m in minibatches)
    assert decoder_tokens("padded", minibatches) == padded > real
    # shared prefix: each group's prompt once, its completions padded to the group's longest
    prompt = trajs[0].prompt_length
    shared = sum(prompt + len(m) * max(t.completion_length for t in m) for m in minibatches)
    assert decoder_tokens("shared prefix", minibatches) == shared
