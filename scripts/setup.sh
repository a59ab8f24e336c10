#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install veritune into it, with the test tools. Idempotent and quiet:
# when pyproject.toml has not changed since the last install (a stamp in .venv holds its hash), nothing is
# installed at all. FORCE_SETUP=1 reinstalls anyway.
#
# The install runs through uv (pinned in the test extra), which installs the same pinned set, the same versions and
# files, several times faster than pip (docs/LAB_NOTEBOOK.md#setup-through-uv). uv
# does not read pip's configuration, so pip's index, no-index, find-links, constraint and certificate settings are
# handed to it, with pip's rule of taking the best version across all indexes. Where uv cannot be installed or
# fails, pip installs instead (VERITUNE_SETUP_PIP=1 asks for pip outright).
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
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip

install_with_uv() {
  local uv_pin
  uv_pin=$(grep -o '"uv==[^"]*"' pyproject.toml | head -n 1 | tr -d '"')
  [ -n "$uv_pin" ] && "${pip[@]}" "$uv_pin" && [ -x .venv/bin/uv ] || return 1
  # pip's settings (its config files and PIP_* variables) as uv's options, one per line
  local options
  options=$(.venv/bin/python - <<'PY'
import re
import subprocess
import sys

listed = subprocess.run(
    [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
).stdout
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}
seen = set()
for line in listed.splitlines():
    match = re.match(r"^[^.]*\.([a-z-]+)='(.*)'$", line)
    if not match:
        continue
    key, value = match.groups()
    if key == "cert":
        print(f"cert={value}")
    elif key == "no-index" and value.lower() in ("1", "true", "yes", "on"):
        print("--no-index")
    elif key in flags:
        for item in value.replace("\\n", " ").split():  # a multi-line value is listed with literal \n
            if (key, item) not in seen:
                seen.add((key, item))
                print(f"{flags[key]}={item}")
PY
) || return 1
  local args=() cert=""
  while IFS= read -r option; do
    case "$option" in
      cert=*) cert=${option#cert=} ;;
      ?*) args+=("$option") ;;
    esac
  done <<< "$options"
  cert=${SSL_CERT_FILE:-$cert}
  env ${cert:+SSL_CERT_FILE="$cert"} .venv/bin/uv pip install --quiet --python .venv/bin/python \
    --index-strategy unsafe-best-match "${args[@]}" -e '.[test]'
}

if [ -n "${VERITUNE_SETUP_PIP:-}" ] || ! install_with_uv; then
  [ -n "${VERITUNE_SETUP_PIP:-}" ] || echo "setup: uv could not install; installing with pip instead"
  "${pip[@]}" -e '.[test]'
fi
echo "$want" > "$stamp"
