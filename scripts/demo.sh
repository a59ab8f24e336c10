#!/usr/bin/env bash
# The embedded default main job on a CPU: set up, then build a tiny Qwen3-VL, a synthetic image world and
# ORIC data from it, train with GRPO, and evaluate the result. Everything lands under outputs/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WANDB_MODE=${WANDB_MODE:-offline}
exec .venv/bin/veritune demo "$@"
