"""docs/CPU_WALKTHROUGH.md: every command of the README's "Real models" section has a CPU form there, and
its script runs, as written, from an empty folder, with the shipped stand-ins (tiny CLIP, tiny Qwen3-VL
that earns reward, synthetic world)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
WALKTHROUGH = REPO_ROOT / "docs" / "CPU_WALKTHROUGH.md"


def readme_commands() -> list[str]:
    """The commands of the README's "Real models" code blocks, continuation lines joined, comments dropped."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Real models") : readme.index("## Habits")]
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        current: list[str] = []
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).rstrip()
            if current or line.startswith(("veritune ", "sbatch ")):
                current.append(line.removesuffix("\\").strip())
                if not line.endswith("\\"):
                    commands.append(" ".join(current))
                    current = []
    return commands


def walkthrough_script() -> str:
    text = WALKTHROUGH.read_text()
    return re.search(r"<!-- cpu-walkthrough -->\n```bash\n(.*?)```", text, re.S).group(1)


def test_every_readme_command_has_a_cpu_form() -> None:
    commands = readme_commands()
    assert len(commands) >= 19 and any(c.startswith("sbatch ") for c in commands)
    listed = re.findall(r"^- `(.+)`$", WALKTHROUGH.read_text(), re.M)
    assert listed == commands  # each README command, in the README's order, with its CPU form beneath


def test_the_vllm_readme_line_stops_on_a_cpu_with_one_line_about_vllm(tmp_path: Path) -> None:
    """The walk-through's sentence for the README's vLLM line: on a CPU, one `error:` line about vLLM (not the
    bf16 one), from the launcher, before any worker starts."""
    from helpers import run_launch

    command = next(c for c in readme_commands() if c.startswith("veritune launch") and "_vllm.yaml" in c)
    assert "On a CPU the launcher stops with one `error:` line about vLLM" in " ".join(WALKTHROUGH.read_text().split())
    result, workers = run_launch(
        tmp_path, *shlex.split(command)[2:], "--output_dir", str(tmp_path / "out"), CUDA_VISIBLE_DEVICES=""
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: use_vllm: vLLM "), result.stderr[-3000:]
    assert workers == []


def test_the_readme_says_where_its_sbatch_training_runs_land() -> None:
    """The README's sbatch training lines write `outputs/<job name>-<job id>` (slurm/train.sbatch's run
    directory), not the recipe's output_dir: the README says so beside them."""
    sbatch = (REPO_ROOT / "slurm" / "train.sbatch").read_text()
    job_name = re.search(r"^#SBATCH --job-name=(\S+)", sbatch, re.M).group(1)
    root = re.search(
        r"RUN_DIR=\W*\$\{VERITUNE_RUN_DIR:-\$\{VERITUNE_RUN_ROOT:-(\w+)\}/\$\{SLURM_JOB_NAME", sbatch
    ).group(1)
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Real models") : readme.index("## Habits")]
    before_sbatch = section[: section.index("sbatch --nodes")]
    assert f"the sbatch runs land in {root}/{job_name}-<job id>" in before_sbatch.splitlines()[-2]


@pytest.mark.slow
def test_walkthrough_script_runs_from_an_empty_folder(tmp_path: Path) -> None:
    """The script as written (about 2.5 minutes on two shared cores): stand-ins, data, GRPO that earns
    reward, LoRA GRPO, DPO, evaluation, blind control and re-scoring."""
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "REPO": str(REPO_ROOT),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "VERITUNE_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    work = tmp_path / "walk"
    work.mkdir()
    result = subprocess.run(
        ["bash", "-c", walkthrough_script()], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-4000:])
    assert "(the recipe's accelerate_config)" in result.stderr
    steps = [json.loads(line) for line in (work / "outputs/tiny-oric-grpo/train_log.jsonl").read_text().splitlines()]
    steps = [row for row in steps if "reward" in row]
    assert len(steps) == 20 and sum(row["reward"] for row in steps) > 0  # the tiny model earns reward
    assert any(row["reward_std"] > 0 for row in steps) and any(row["grad_norm"] > 0 for row in steps)
    assert (work / "outputs/tiny-oric-grpo-lora/adapter_config.json").is_file()
    assert (work / "outputs/tiny-finer-dpo/adapter_config.json").is_file()
    for benchmark in ("oric_bench_r1", "pope", "finer"):
        assert (work / "outputs/eval" / benchmark / "metrics.json").is_file(), benchmark
    assert (work / "outputs/eval-blind/finer_yn/metrics.json").is_file()
    assert (work / "outputs/eval/pope/predictions.metrics.json").is_file()
