#!/usr/bin/env bash
# The first GPU hour in one run on a bare one-GPU machine (PyTorch only, no network), at most 8 minutes, ending
# in one table (check, status, time, key figure); exit status non-zero when any check failed:
#   install          the carried wheels (gpu_wheels/, from scripts/gpu_wheels.sh) and this project, offline
#   cuda-tests       pytest -m gpu tests/test_gpu.py
#   main-job         the README's main job (tiny model, SFT then GRPO) in bf16; held-out accuracy >= 0.95
#   accelerate-bf16  accelerate launch, one process, mixed_precision bf16 (configs/accelerate/gpu1_bf16.yaml)
#   fsdp2-1proc      accelerate launch, FSDP2 on one process (configs/accelerate/fsdp_gpu1.yaml)
#   grpo-7b          mmreason bench grpo-shape --shape 7b: two GRPO steps of a random-init model of
#                    Qwen2.5-VL-7B's published sizes, built on the GPU (gradient checkpointing, chunked head)
#   vllm-colocate    where vllm is installed (not on the lent machines): bench grpo-step, HF against vLLM
# Each check runs under its own `timeout`, capped by what is left of the total budget (GPU_CHECK_BUDGET_S,
# 450 s); a failing check does not stop the next. Outputs and logs: WORK_DIR (default: a new temporary folder).
# Before a lent machine: `bash scripts/gpu_wheels.sh` here, then carry gpu_wheels/ with the tree.
# --cpu: the parts that run without a GPU, at reduced size (main job 2 + 2 steps, no accuracy bar; the two
# launcher configs on the CPU, the same code; the bench on the tiny shape); --dry-run: print each check's commands, run none (tests/bench/test_gpu_check.py runs it).
# Usage: bash scripts/gpu_check.sh [--cpu | --dry-run] [WORK_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MODE=gpu
case "${1:-}" in --cpu | --dry-run) MODE=${1#--} && shift ;; esac
export W=${1:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$W" && : >"$W/results.tsv"
export PY=${PYTHON:-python3} MODE
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MMREASON_CACHE="$W/cache" PYTHONUNBUFFERED=1
BUDGET=${GPU_CHECK_BUDGET_S:-450}
START=$SECONDS

x() { # run a command, or only print it in a dry run
    if [[ $MODE == dry-run ]]; then echo "+ $*"; else "$@"; fi
}
export -f x

check() { # NAME LIMIT_S FUNCTION: run FUNCTION under timeout, record name, exit status, seconds
    local name=$1 limit=$2 fn=$3 left t0 rc
    left=$((BUDGET - (SECONDS - START)))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        echo "not started: the ${BUDGET} s budget is spent" >"$W/$name.figure"
        printf '%s\t1\t0\n' "$name" >>"$W/results.tsv"
        return
    fi
    echo "== $name (limit ${limit} s)"
    t0=$EPOCHREALTIME
    timeout --kill-after=10 "$limit" bash -o pipefail -c "$fn" >"$W/$name.log" 2>&1
    rc=$?
    [[ $MODE == dry-run && $rc == 0 ]] && rc=77 && echo "dry run" >"$W/$name.figure"
    tail -n 3 "$W/$name.log"
    awk -v n="$name" -v rc="$rc" -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%s\t%s\t%.1f\n", n, rc, b - a }' \
        >>"$W/results.tsv"
}

skip() { # NAME REASON
    echo "$2" >"$W/$1.figure"
    printf '%s\t77\t0\n' "$1" >>"$W/results.tsv"
}

install_deps() { # the wheels are for the GPU machine's Python 3.12: a CPU run uses the environment it has
    if [[ $MODE != cpu ]] && compgen -G "gpu_wheels/*.whl" >/dev/null; then
        x "$PY" -m pip install -q --no-index --no-deps --find-links gpu_wheels gpu_wheels/*.whl || return 1
    fi
    (cd / && "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('mmreason') is None)") ||
        x "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
    x "$PY" -c "import torch, transformers, accelerate, mmreason; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" |
        tee "$W/install.figure"
}

cuda_tests() {
    x "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py | tee "$W/pytest.out"
    local rc=$?
    tail -n 1 "$W/pytest.out" >"$W/cuda-tests.figure"
    return $rc
}

main_job() { # the README's first command's SFT then GRPO, in bf16, on a fresh tiny model
    local sft=30 grpo=60 bar=0.95 more=()
    [[ $MODE == cpu ]] && sft=2 grpo=2 bar=0 more=(eval_steps=2 eval_limit=4 save_steps=0 prompts_per_step=2)
    x "$PY" -m mmreason tiny-model "$W/tiny-model" &&
        x "$PY" -m mmreason sft configs/quickstart_sft.yaml model.name_or_path="$W/tiny-model" \
            output_dir="$W/quickstart-sft" model.dtype=bfloat16 max_steps=$sft &&
        x "$PY" -m mmreason train configs/quickstart.yaml model.name_or_path="$W/quickstart-sft/checkpoint-$sft/model" \
            output_dir="$W/quickstart" model.dtype=bfloat16 max_steps=$grpo "${more[@]}" &&
        x "$PY" -m mmreason.bench.gpu_check accuracy "$W/quickstart" --min $bar | tee "$W/main-job.figure"
}

launched() { # NAME CONFIG: two GRPO steps of the tiny model under accelerate launch with CONFIG
    [[ -d $W/tiny-model ]] || x "$PY" -m mmreason tiny-model "$W/tiny-model" || return 1
    x "$PY" -m accelerate.commands.launch --config_file "$2" -m mmreason train configs/quickstart.yaml \
        model.name_or_path="$W/tiny-model" output_dir="$W/$1" model.dtype=bfloat16 max_steps=2 eval_steps=0 \
        save_steps=0 log_completions_steps=0 &&
        x "$PY" -m mmreason.bench.gpu_check steps "$W/$1" --expect 2 | tee "$W/$1.figure"
}

vllm_colocate() { # the GRPO step split and generated tokens/s of HF generate and colocated vLLM
    x "$PY" -m mmreason bench grpo-step --size small --backend hf,vllm --max-completion-length 128 \
        --set rollout.vllm_gpu_memory_utilization=0.3 | tee "$W/vllm.out" &&
        x grep -o "vllm / hf: .*" "$W/vllm.out" >"$W/vllm-colocate.figure"
}

grpo_shape() { # SHAPE: two GRPO steps of a random-init model of that shape, built on the device
    x "$PY" -m mmreason bench grpo-shape --shape "$1" --steps 2 --json "$W/grpo-shape.json" &&
        x "$PY" -m mmreason.bench.gpu_check bench "$W/grpo-shape.json" | tee "$W/grpo-$1.figure"
}
export -f install_deps cuda_tests main_job launched vllm_colocate grpo_shape

[[ $MODE == gpu ]] && { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; }
check install 90 install_deps
if [[ $MODE == cpu ]]; then
    skip cuda-tests "needs CUDA"
    check main-job 240 main_job
    check accelerate-bf16 120 "launched accelerate-bf16 configs/accelerate/gpu1_bf16.yaml"
    check fsdp2-1proc 120 "launched fsdp2-1proc configs/accelerate/fsdp_gpu1.yaml"
    check grpo-tiny 120 "grpo_shape tiny"
else
    check cuda-tests 120 cuda_tests
    check main-job 200 main_job
    check accelerate-bf16 75 "launched accelerate-bf16 configs/accelerate/gpu1_bf16.yaml"
    check fsdp2-1proc 90 "launched fsdp2-1proc configs/accelerate/fsdp_gpu1.yaml"
    check grpo-7b 150 "grpo_shape 7b"
    if [[ $MODE == dry-run ]] || "$PY" -c "import vllm" 2>/dev/null; then
        check vllm-colocate 120 vllm_colocate
    else
        skip vllm-colocate "vllm not installed"
    fi
fi
echo
echo "GPU check ($MODE), $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), outputs in $W:"
"$PY" -m mmreason.bench.gpu_check table "$W"
