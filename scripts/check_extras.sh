#!/usr/bin/env bash
# Resolve veritune's pins together with every optional extra (gpu, vllm, bench, test) for the GPU machines
# researchers install on: Linux x86_64 (manylinux_2_28), Python 3.11. uv reads the packages' metadata
# only (no CUDA wheel is downloaded), so this runs on a CPU machine in seconds. A pin bump that breaks
# `pip install -e '.[vllm,gpu]'` fails here with uv's explanation (which requirement conflicts with which).
#   bash scripts/check_extras.sh [LOCKFILE]   # LOCKFILE: where to write the resolution (default: none)
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-.venv/bin/uv}
out=${1:-/dev/null}
"$uv" pip compile pyproject.toml --all-extras --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-header --quiet --output-file "$out"
echo "extras resolve together: veritune + every extra (gpu, vllm, bench, test) on Linux x86_64, Python 3.11"
