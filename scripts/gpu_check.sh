#!/usr/bin/env bash
# The checks a lent GPU is for, in one short run: the CUDA tests (skipped on CPU machines), then the
# policy-update throughput of a random-init Qwen2.5-VL-3B-shaped model with the shared prefix (the
# default), the plain padded forward, and the shared prefix under gradient checkpointing.
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
