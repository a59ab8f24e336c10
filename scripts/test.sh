#!/usr/bin/env bash
# Set up, then run the whole test suite (and the linter). As root on Debian, the Slurm packages the
# Slurm tests need and the Chromium the report's browser test needs are installed first; elsewhere those
# tests skip with a reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f .ci/install_slurm.sh ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  bash .ci/install_slurm.sh
fi
if [ -f .ci/install_chromium.sh ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  bash .ci/install_chromium.sh
fi
export WANDB_MODE=offline HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/pytest "$@"
