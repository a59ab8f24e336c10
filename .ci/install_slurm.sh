#!/usr/bin/env bash
# Debian's Slurm and munge for the local-cluster tests (idempotent, quiet).
set -euo pipefail
if command -v slurmctld >/dev/null && command -v munged >/dev/null; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq slurm-wlm munge >/dev/null
