#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install veritune into it, with the test tools. Idempotent and quiet:
# when pyproject.toml has not changed since the last install (a stamp in .venv holds its hash), pip is not
# run at all. FORCE_SETUP=1 reinstalls anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
stamp=.venv/.veritune-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -z "${FORCE_SETUP:-}" ] && [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
echo "setup: installing veritune and its pinned dependencies into .venv (once per change of pyproject.toml)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
echo "$want" > "$stamp"
