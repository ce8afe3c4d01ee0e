"""A recording stand-in for the ``vllm`` module, for the tests of what the trainer asks of a vLLM engine (its
arguments per process, the colocated push, the sleep / wake order) in the main venv, where vLLM is not
installed. It samples nothing real: every row is the prompt's first token then EOS, log-prob -1."""

from __future__ import annotations

import os
from types import SimpleNamespace


class RecordingLLM:
    """``vllm.LLM``: records its arguments, the launcher variables it saw, and every call, in ``calls``."""

    built: list[RecordingLLM] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
        self.calls: list[tuple] = []
        self.loaded: list[tuple[str, object]] = []
        parallel = SimpleNamespace(world_size=kwargs.get("tensor_parallel_size", 1))
        self.llm_engine = SimpleNamespace(
            model_config=SimpleNamespace(get_vocab_size=lambda: 64, max_model_len=kwargs.get("max_model_len")),
            vllm_config=SimpleNamespace(parallel_config=parallel),
            reset_encoder_cache=lambda: None,
            engine_core=None,
        )
        RecordingLLM.built.append(self)

    def generate(self, requests, params, use_tqdm=False, lora_request=None):
        self.calls.append(("generate", len(requests)))
        eos = params[0].stop_token_ids[0]
        outs = []
        for req in requests:
            ids = req["prompt_token_ids"]
            lps = [{ids[0]: SimpleNamespace(logprob=-1.0)}, {eos: SimpleNamespace(logprob=-1.0)}]
            completion = SimpleNamespace(token_ids=[ids[0], eos], logprobs=lps, finish_reason="stop")
            outs.append(SimpleNamespace(prompt_token_ids=ids, outputs=[completion]))
        return outs

    def collective_rpc(self, method, args=(), kwargs=None):
        kwargs = kwargs or {}
        if method == "reload_weights" and "weights_iterator" in kwargs:
            self.loaded = [(name, t.clone()) for name, t in kwargs["weights_iterator"]]
            self.calls.append(("push", len(self.loaded)))
        else:
            self.calls.append((method, args))
        return [None]

    def reset_prefix_cache(self):
        pass

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags or ())))


def recording_vllm() -> SimpleNamespace:
    """The stand-in module (``LLM``, ``SamplingParams``)."""
    return SimpleNamespace(LLM=RecordingLLM, SamplingParams=lambda **kw: SimpleNamespace(**kw))


def use_recording_vllm(monkeypatch) -> type[RecordingLLM]:
    """Make ``VLLMBackend`` build ``RecordingLLM`` engines; the launcher variables it sets are undone after."""
    from mmreason.rollout.backends import vllm_engine

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")  # remembered as it was (absent or set), restored after the test
        monkeypatch.delenv(name)  # a process started without a launcher
    monkeypatch.setattr(vllm_engine, "import_vllm", recording_vllm)
    RecordingLLM.built = []
    return RecordingLLM
