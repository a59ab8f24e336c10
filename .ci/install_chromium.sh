#!/usr/bin/env bash
# Debian's Chromium for the report's headless-browser test (tests/test_report_browser.py; idempotent, quiet).
set -euo pipefail
if command -v chromium >/dev/null; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
