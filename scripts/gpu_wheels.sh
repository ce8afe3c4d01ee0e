#!/usr/bin/env bash
# Builds gpu_wheels/ (git-ignored): the wheels of this project's runtime dependencies that a lent GPU machine
# lacks, for its Python 3.12 on x86-64, so that scripts/gpu_check.sh installs them there with no network
# (pip install --no-index). Run it here, where PyPI is reachable, then carry gpu_wheels/ with the tree.
# That machine has PyTorch, transformers, accelerate, peft, pyyaml, rich, tqdm, jinja2, matplotlib, numpy,
# pillow, tokenizers, pandas and pyarrow; of the project's dependencies it lacks those below (pinned, with the
# ones they need) and three that are left out on purpose: av (35 MB) and decord (14 MB), the video decoders,
# and datasets (it needs a newer pyarrow than the image may have). Nothing the GPU check runs imports them:
# they are imported where a pack or a medium needs them (tests/bench/test_gpu_check.py runs the main job with
# all of them unimportable). The tree and the wheels must stay under 64 MiB together; this script checks it.
# Usage: bash scripts/gpu_wheels.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu_wheels}
WHEELS=(
    math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 # math answers
    orjson==3.13.0                                                                    # mmreason report
    rank-bm25==0.2.2                                                                  # the mrag pack
    easy-vqa==1.0                                                                     # the vision pack's data
    pypdfium2==5.15.2                                                                 # PDF pages
    qwen-vl-utils==0.0.14                                                             # Qwen's media helpers
)
mkdir -p "$OUT"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$OUT" "${WHEELS[@]}"
wheels=$(du -cb "$OUT"/*.whl | tail -n 1 | cut -f 1)
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f 1)
echo "$(find "$OUT" -name "*.whl" | wc -l) wheels, $((wheels / 1024)) KiB; with the tree ($((tree / 1024)) KiB):" \
    "$(((wheels + tree) / 1048576)) MiB of the 64 MiB a device call carries"
((wheels + tree < 60 * 1048576)) || { echo "gpu_wheels.sh: over 60 MiB with the tree: carry fewer wheels" >&2; exit 1; }
