#!/usr/bin/env bash
# The embedded default main job on a CPU, the miniature ORIC and FINER experiments: set up, then build a
# synthetic world with scene priors, tiny models, a warm-started base model, ORIC and FINER data with the
# real builders; train with GRPO and DPO; end with a before/after table (metric, base, trained, difference,
# 95% paired bootstrap interval). Everything lands under outputs/demo/; docs/RESULTS.md has the measured table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WANDB_MODE=${WANDB_MODE:-offline}
exec .venv/bin/veritune demo "$@"
