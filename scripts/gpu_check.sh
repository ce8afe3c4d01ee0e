#!/usr/bin/env bash
# The checks a lent GPU is for, in one short run: the CUDA tests (skipped on CPU machines), then the
# policy-update throughput of a random-init Qwen2.5-VL-3B-shaped model with the shared prefix (the
# default), the plain padded forward, and the shared prefix under gradient checkpointing; then the GRPO step
# with HF generate and with vLLM colocated (when vllm is installed).
# Usage: bash scripts/gpu_check.sh [extra bench arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
python -c "import torch, importlib.util as u; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'flash_attn', u.find_spec('flash_attn') is not None)"
python -m pytest -q -m gpu tests
mmreason bench update-throughput --shape 3b "$@"
mmreason bench update-throughput --shape 3b --plain "$@"
mmreason bench update-throughput --shape 3b --gradient-checkpointing "$@"
# vLLM colocate rollouts (when vllm is installed: pip install ".[vllm]"): the GRPO step split and
# generated tokens/s of HF generate and vLLM on the small built-in model, with the ratio.
if python -c "import vllm" 2>/dev/null; then
    mmreason bench grpo-step --size small --backend hf,vllm --max-completion-length 128 \
        --set rollout.vllm_gpu_memory_utilization=0.3
else
    echo "vllm not installed: skipping the vLLM colocate bench"
fi
