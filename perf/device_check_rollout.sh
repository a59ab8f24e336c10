#!/usr/bin/env bash
# Rollout-batch device check: the GRPO step of random Qwen3-VL-2B (full) and -8B (LoRA) at generation batches of
# 256 / 64 / 8 completions, veritune beside plain TRL, and veritune's compiled decode (recipe key compiled_decode)
# at B = 256. One call on one H100, within one device call's limit (the marks below). Follow-ups on a still-warm
# machine: `bash perf/device_check_rollout.sh micro` (micro-batches 2 / 32 against the main call's 8) and
# `bash perf/device_check_rollout.sh probe` (text-only decode engines: generate, generate_batch, a compiled static
# cache), each shorter than the main call.
#
# Here, once (wheels for the pins; the image has torch 2.11.0, accelerate 1.15.0, no flash-attn, no vLLM):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     trl==1.16.0 transformers==5.20.2 datasets==5.2.0 peft==0.21.2 tokenizers==0.23.3 dill==0.4.1 \
#     multiprocess==0.70.19 fsspec==2026.9.0 regex==2026.11.19          # 9 wheels, 19.9 MB
#   python perf/bench_rollout.py --smoke --runs veritune:8,compiled:8,plain:16   # the code path on the CPU first
# Device call: command "bash perf/device_check_rollout.sh", carry [".whl"], timeout_s 560.
set -o pipefail
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log() { grep --line-buffered -v -i -E "warn|Writing model shards" | tee -a "$OUT/log"; }
left_until() { echo $(($1 - (SECONDS - T0))); } # seconds from now to the mark at $1 s after the start
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, trl; print(torch.__version__, transformers.__version__, trl.__version__)"
} 2>&1 | log
case "${1:-}" in
probe) # text-only 2B decoder at B = 256: generate (TRL's path), generate_batch (paged), static cache + compile
  python3 perf/bench_rollout.py --size 2b --runs "" --engine-probe --deadline-s "$(left_until 230)" 2>&1 | log
  exit ;;
micro) # 2B at B = 256 with micro-batches of 2 and 32 completions (the main call trains in micro-batches of 8)
  python3 perf/bench_rollout.py --size 2b --runs veritune:256:32,veritune:256:2 --estimate-s 256:70 \
    --deadline-s "$(left_until 200)" --json "$OUT/micro.json" 2>&1 | log
  exit ;;
esac
# 1. 2B full-parameter, in priority order: B = 256 veritune, plain TRL, compiled_decode; then B = 64, 8; mark 320 s
python3 perf/bench_rollout.py --size 2b --runs veritune:256,plain:256,compiled:256,veritune:64,veritune:8 \
  --estimate-s 8:38,64:42,256:62 --compile-s 90 --deadline-s "$(left_until 320)" --json "$OUT/2b.json" 2>&1 | log
# 2. 8B LoRA (rank 32 on q_proj/v_proj, as bench_gpu.py --lora): B = 256, 64, 8; mark 530 s
python3 perf/bench_rollout.py --size 8b --lora --runs veritune:256,veritune:64,veritune:8 \
  --estimate-s 8:38,64:42,256:62 --deadline-s "$(left_until 530)" --json "$OUT/8b.json" 2>&1 | log
echo "device check: $((SECONDS - T0)) s in all" | tee -a "$OUT/log"
