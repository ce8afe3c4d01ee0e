"""The rollout backend's choice and a vLLM server's address, declared once for the trainer and the eval.

``RolloutConfig`` (``rollout.*`` in a run config) and eval's ``ModelArgs`` (``--model_args``) take their
``vllm_server_*`` / ``vllm_generate_timeout`` fields from ``VllmConnection``, so both read the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

# hf: HF generate in the process; vllm: a vLLM engine (docs/vllm.md)
RolloutBackend = Literal["hf", "vllm"]
# colocate: an engine of its own; server: a `mmreason vllm-serve`
VllmMode = Literal["colocate", "server"]


@dataclass
class VllmConnection:
    """How to reach a ``mmreason vllm-serve`` server (``vllm_mode: server``) and how long to wait on an engine."""

    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    # the server's key (else $MMREASON_VLLM_API_KEY, else its token file); never saved
    vllm_server_api_key: str | None = None
    vllm_server_timeout: float = 240.0  # seconds to wait for the server to answer at the start
    # seconds one generate call may take (either mode); past it: a dead engine
    vllm_generate_timeout: float = 600.0

    RANGES: ClassVar[dict[str, str]] = {
        "vllm_server_port": "[1, 65535]",
        "vllm_server_timeout": "(0, inf)",
        "vllm_generate_timeout": "(0, inf)",
    }
