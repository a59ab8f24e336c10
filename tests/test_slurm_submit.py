"""``veritune slurm submit`` from any directory: the sbatch scripts are the repository's, by absolute path."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from slurm_cluster import available, local_cluster

from veritune import slurm_submit
from veritune.cli import main

RECIPE = REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"
CHAIN = [
    "slurm",
    "submit",
    "--entry",
    "grpo",
    "--recipe",
    str(RECIPE),
    "--build",
    "synthetic-world --out data/world",
    "--eval-benchmarks",
    "pope",
    "--eval-data-root",
    "data/benchmarks",
    "--run-dir",
    "outputs/r",
    "--dry-run",
]


def test_dry_run_from_another_directory_names_the_repository_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(CHAIN) == 0
    commands = [shlex.split(line[2:]) for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    scripts = [word for command in commands for word in command if word.endswith(".sbatch")]
    assert scripts == [str(REPO_ROOT / "slurm" / f"{stage}.sbatch") for stage in ("build", "train", "eval")]
    assert all(Path(script).is_absolute() and Path(script).is_file() for script in scripts)
    assert [command[0] for command in commands] == ["sbatch"] * 3


def test_missing_script_is_one_error_line_before_any_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "slurm").mkdir()
    for stage in ("build", "train"):
        (tmp_path / "slurm" / f"{stage}.sbatch").write_text("#!/usr/bin/env bash\n")
    monkeypatch.setattr(slurm_submit, "SLURM_DIR", tmp_path / "slurm")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(CHAIN)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert err.strip() == (
        f"error: {tmp_path / 'slurm' / 'eval.sbatch'} not found: veritune slurm submit runs the repository's "
        "slurm/ scripts; use veritune from a checkout of its repository (pip install -e .)"
    )
    assert "$ sbatch" not in out  # nothing was submitted (nor printed as submitted)


@pytest.mark.parametrize(
    ("extra", "run_dir"),
    [
        ([], "outputs/tiny-oric-grpo"),  # the recipe's output_dir, where the README's `eval run --model` points
        (["--override", "--output_dir outputs/mine"], "outputs/mine"),
        (["--run-dir", "outputs/r"], "outputs/r"),
    ],
)
def test_run_directory_is_where_the_training_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], extra: list[str], run_dir: str
) -> None:
    monkeypatch.chdir(tmp_path)
    chain = [arg for arg in CHAIN if arg not in ("--run-dir", "outputs/r")]
    assert main([*chain, *extra]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {run_dir}\n" in out
    (evaluation,) = [shlex.split(line[2:]) for line in out.splitlines() if "eval.sbatch" in line]
    assert evaluation[evaluation.index("run") + 1] == run_dir and f"VERITUNE_RUN_DIR={run_dir}" in out


# ---------------------------------------------------------------------------------------------- the eval job's GPUs


def sbatch_lines(out: str) -> dict[str, list[str]]:
    """The printed sbatch commands by stage (the name of the script each runs)."""
    commands = [shlex.split(line[2:]) for line in out.splitlines() if line.startswith("$ sbatch")]
    return {Path(next(w for w in command if w.endswith(".sbatch"))).stem: command for command in commands}


def gpu_flags(command: list[str]) -> list[str]:
    return [word for word in command if word.startswith("--gpus")]


@pytest.mark.parametrize(
    ("extra", "train", "evaluation"),
    [
        (["--gpus-per-node", "4"], ["--gpus-per-node=4"], ["--gpus-per-node=1"]),  # one eval run process: one GPU
        (["--gpus-per-node", "4", "--eval-gpus", "2"], ["--gpus-per-node=4"], ["--gpus-per-node=2"]),
        (["--gpus-per-node", "4", "--eval-gpus", "0"], ["--gpus-per-node=4"], []),  # asked for: a CPU node
        ([], [], []),  # a CPU-only submission asks for no GPU anywhere
        (["--eval-gpus", "1"], [], ["--gpus-per-node=1"]),
    ],
)
def test_eval_job_asks_for_gpus_when_training_has_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    train: list[str],
    evaluation: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*CHAIN, *extra]) == 0
    jobs = sbatch_lines(capsys.readouterr().out)
    assert (gpu_flags(jobs["train"]), gpu_flags(jobs["eval"]), gpu_flags(jobs["build"])) == (train, evaluation, [])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--eval-gpus", "-1"], "error: --eval-gpus: must be 0 (a CPU node) or more, got -1"),
        (["--eval-gpus", "1"], "error: --eval-gpus: there is no eval job without --eval-benchmarks"),
    ],
)
def test_bad_eval_gpus_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    chain = CHAIN if "-1" in extra else [arg for arg in CHAIN if arg not in ("--eval-benchmarks", "pope")]
    chain = chain if "-1" in extra else [arg for arg in chain if arg not in ("--eval-data-root", "data/benchmarks")]
    with pytest.raises(SystemExit) as exit_info:
        main([*chain, *extra])
    out, err = capsys.readouterr()
    assert (exit_info.value.code, err.strip()) == (2, message) and "$ sbatch" not in out


def test_submit_help_shows_each_default_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["slurm", "submit", "--help"])
    options = capsys.readouterr().out.split("options:")[1]
    entries = re.split(r"\n  (?=-)", options)  # one entry per option: its flags, then its help lines
    helps = {entry.split()[0]: " ".join(entry.split()) for entry in entries if entry.strip()}
    assert {flag: text.count("default") for flag, text in helps.items() if text.count("default") > 1} == {}
    assert "(default: outputs)" in helps["--run-root"] and "default: 1 when --gpus-per-node" in helps["--eval-gpus"]


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_eval_job_gpu_request_reaches_slurm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chain submitted for real, every job held, to a local cluster whose node has 2 fake GPUs: each job's
    GPU request as Slurm holds it; then the GPU eval job alone, released: Slurm allocates it its GPU."""
    import time

    monkeypatch.chdir(tmp_path)
    chain = [arg for arg in CHAIN if arg != "--dry-run"] + ["--sbatch-arg=--hold"]
    with local_cluster(tmp_path / "slurm", gpus=2) as env:
        monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
        submitted = {}
        for extra, requests in (
            (["--gpus-per-node", "2"], {"build": None, "train": "gres:gpu:2", "eval": "gres:gpu:1"}),
            ([], {"build": None, "train": None, "eval": None}),
            (
                ["--gpus-per-node", "2", "--eval-gpus", "2"],
                {"build": None, "train": "gres:gpu:2", "eval": "gres:gpu:2"},
            ),
        ):
            assert main([*chain, *extra]) == 0
            jobs = dict(part.split() for part in capsys.readouterr().out.splitlines()[-1][6:].split(", "))
            shown = {stage: job_fields(job, env) for stage, job in jobs.items()}
            assert {stage: fields.get("TresPerNode") for stage, fields in shown.items()} == requests, extra
            assert all(fields["JobState"] == "PENDING" for fields in shown.values())
            submitted[" ".join(extra)] = jobs
        evaluation = submitted["--gpus-per-node 2"]["eval"]
        others = [job for jobs in submitted.values() for job in jobs.values() if job != evaluation]
        subprocess.run(["scancel", *others], env=env, check=True)
        subprocess.run(["scontrol", "update", f"JobId={evaluation}", "Dependency="], env=env, check=True)
        subprocess.run(["scontrol", "release", evaluation], env=env, check=True)
        deadline = time.monotonic() + 120
        while job_fields(evaluation, env)["JobState"] in ("PENDING", "CONFIGURING", "RUNNING"):
            assert time.monotonic() < deadline, job_fields(evaluation, env)
            time.sleep(0.5)
        # It stops at once (there is no trained model in outputs/r), after Slurm gave it a node and a GPU.
        allocated = job_fields(evaluation, env, "-d")
    assert allocated["JOB_GRES"] == "gpu:1" and allocated["BatchHost"] != "(null)"
    assert "error: not found: outputs/r" in next((tmp_path / "logs").glob(f"*-{evaluation}.out")).read_text()


def job_fields(job: str, env: dict[str, str], *flags: str) -> dict[str, str]:
    """``scontrol show job``'s KEY=VALUE fields."""
    command = ["scontrol", "show", "job", *flags, job]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


# ---------------------------------------------------------------------------------------------- values, not shell

# A run directory and an override value that a shell would run or split: each must reach the training command
# as one argument, as written, and nothing in them may run.
ODD_RUN_DIR = "outputs/run '$(id>PWNED)' `id>PWNED2`"
ODD_RUN_NAME = 'x"$(id>PWNED3)" two words; id>PWNED4'


def launch_recorder(tmp_path: Path) -> tuple[Path, Path]:
    """A Python for the jobs that records ``-m veritune.launch``'s arguments (and runs anything else)."""
    import sys

    record = tmp_path / "launch.json"
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ] && [ "$2" = "veritune.launch" ]; then\n'
        f"  shift 2; exec {sys.executable} -c 'import json, sys; json.dump(sys.argv[2:], open(sys.argv[1], \"w\"))' "
        f'{record} "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    return python, record


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_recipe_and_override_values_reach_the_training_command_intact(tmp_path: Path) -> None:
    """`veritune slurm submit` to a local cluster: the recipe's output_dir and an --override value holding
    `$(...)`, backticks, quotes, `;` and spaces arrive as single arguments and run nothing."""
    import json
    import sys

    from helpers import entry_env

    project = tmp_path / "project"
    project.mkdir()
    recipe = project / "odd.yaml"
    recipe.write_text(f"include: {RECIPE}\noutput_dir: {json.dumps(ODD_RUN_DIR)}\n")
    python, record = launch_recorder(tmp_path)
    override = shlex.join(["--run_name", ODD_RUN_NAME, "--report_to", "none"])
    with local_cluster(tmp_path / "slurm") as cluster:
        env = entry_env(**cluster, VERITUNE_PYTHON=str(python))
        command = [sys.executable, "-m", "veritune.cli", "slurm", "submit", "--entry", "grpo", "--recipe", str(recipe)]
        command += ["--override", override, "--sbatch-arg=--wait"]
        result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    logs = "\n".join(path.read_text()[-2000:] for path in (project / "logs").glob("*.out"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:] + logs
    argv = json.loads(record.read_text())
    script = argv[argv.index(str(REPO_ROOT / "finetune" / "grpo.py")) :]
    assert script[script.index("--output_dir") + 1] == ODD_RUN_DIR
    assert script[script.index("--run_name") + 1] == ODD_RUN_NAME
    assert script[-4:] == ["--run_name", ODD_RUN_NAME, "--report_to", "none"]
    assert (project / ODD_RUN_DIR).is_dir()
    assert sorted(path.name for path in tmp_path.rglob("PWNED*")) == []
