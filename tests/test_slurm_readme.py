"""The README's ``sbatch`` lines, exactly as written, from a fresh clone, on a real local Slurm cluster.

A fresh clone is the repository's tracked files (``git ls-files``) plus ``.venv`` (what ``make setup``
creates; linked here). The one change to each line: ``--nodes``/``--gpus-per-node`` are dropped, because the
local cluster is one CPU node. Slurm opens ``#SBATCH --output=logs/...`` before the job starts, so a missing
``logs/`` would fail the job without any log: every job here must leave its log in ``logs/``.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT, entry_env
from slurm_cluster import available, local_cluster

pytestmark = [pytest.mark.slow, pytest.mark.skipif(available() is not None, reason=str(available()))]


def readme_sbatch_lines() -> list[list[str]]:
    lines = [
        line.strip()
        for line in (REPO_ROOT / "README.md").read_text().splitlines()
        if line.strip().startswith("sbatch ")
    ]
    assert lines, "the README shows no sbatch line"
    commands = []
    for line in lines:
        words = shlex.split(line, comments=True)[1:]
        kept = []
        skip = False
        for word in words:
            if skip:
                skip = False
            elif word in ("--nodes", "--gpus-per-node"):
                skip = True
            else:
                kept.append(word)
        commands.append(kept)
    return commands


def fresh_clone(target: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, files):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / ".venv").symlink_to(REPO_ROOT / ".venv")
    return target


def test_readme_sbatch_lines_log_into_logs_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    assert (clone / "logs").is_dir()  # tracked (logs/.gitkeep): Slurm can open its output file
    with local_cluster(tmp_path / "slurm") as cluster:
        for words in readme_sbatch_lines():
            result = subprocess.run(
                ["sbatch", "--parsable", "--wait", *words],
                cwd=clone,
                env={**entry_env(), **cluster},
                capture_output=True,
                text=True,
                timeout=900,
            )
            job = result.stdout.strip().split(";")[0]
            assert job, result.stderr
            script = next(word for word in words if word.startswith("slurm/"))
            name = re.search(r"--job-name=(\S+)", (clone / script).read_text()).group(1)
            log = clone / "logs" / f"{name}-{job}.out"
            assert log.is_file(), f"{' '.join(words)}: no log {log}"
            if "build.sbatch" in script:
                assert result.returncode == 0, log.read_text()[-2000:]
                assert (clone / "data" / "world" / "train" / "instances.json").is_file()
            else:  # the 8B model cannot load offline: the job fails, but with its log and veritune's header in it
                assert "veritune: grpo recipes/qwen3vl_oric.yaml" in log.read_text()
                # where the README says the run lands
                assert f"run dir outputs/{name}-{job}" in log.read_text()
                assert f"the sbatch runs land in outputs/{name}-<job id>" in (clone / "README.md").read_text()
