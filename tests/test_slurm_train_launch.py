"""The accelerate command line slurm/train.sbatch launches, with ``srun``, ``scontrol`` and the launcher
stubbed (no Slurm needed): the script runs as the batch step would, on N CPU-only or GPU nodes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, entry_env

SCRIPT = REPO_ROOT / "slurm" / "train.sbatch"
RECIPE = "recipes/miniature/tiny_oric_demo.yaml"  # accelerate_config: recipes/accelerate/single.yaml


def stubs(tmp_path: Path) -> tuple[Path, Path]:
    """A bin folder with ``scontrol`` and ``srun`` stubs, and a Python that records ``-m veritune.launch``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/usr/bin/env bash\n[ "$1 $2" = "show hostnames" ] && for i in $(seq "$SLURM_NNODES"); do echo "vt$i"; done\n'
    )
    # srun: run the step's command once, as node 0 (the batch step's own node)
    (bin_dir / "srun").write_text(
        '#!/usr/bin/env bash\nwhile [ $# -gt 0 ] && [ "$1" != bash ]; do shift; done\nSLURM_NODEID=0 exec "$@"\n'
    )
    record = tmp_path / "launch.json"
    python = bin_dir / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ] && [ "$2" = "veritune.launch" ]; then\n'
        f"  shift 2; exec {sys.executable} -c 'import json, sys; "
        f'json.dump(sys.argv[1:], open("{record}", "w"))\' "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return bin_dir, record


def launched(
    tmp_path: Path, *args: str, nodes: int = 1, gpus: int = 0, recipe: str = RECIPE, **extra: str
) -> list[str]:
    """Run slurm/train.sbatch with ``recipe`` on ``nodes`` nodes of ``gpus`` GPUs (``extra``: more of the
    job's environment); the arguments it gave veritune.launch."""
    bin_dir, record = stubs(tmp_path)
    env = {
        **entry_env(),
        "PATH": f"{bin_dir}:{entry_env().get('PATH', '')}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "t",
        "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NODELIST": f"vt[1-{nodes}]",
        "SLURM_SUBMIT_DIR": str(REPO_ROOT),
        "VERITUNE_PYTHON": str(bin_dir / "python"),
        "VERITUNE_RUN_ROOT": str(tmp_path / "runs"),
        **extra,
    }
    env.pop("SLURM_GPUS_ON_NODE", None)
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = str(gpus)
    result = subprocess.run(
        ["bash", str(SCRIPT), "grpo", recipe, *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(record.read_text())


def accelerate_launcher(argv: list[str]) -> str:
    """Which of accelerate's launchers ``accelerate launch argv`` would use (its own argument checks run)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = launch_command_parser().parse_args(argv)
    _validate_launch_command(args)
    if args.use_deepspeed and not args.cpu:
        return "deepspeed"
    if args.multi_gpu and not args.cpu:
        return "multi-process"
    return "simple"


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_one_cpu_node_is_a_single_cpu_process(tmp_path: Path) -> None:
    argv = launched(tmp_path)
    assert "--cpu" in argv and "--multi_gpu" not in argv
    assert value(argv, "--num_machines") == "1" and value(argv, "--num_processes") == "1"
    assert "--use_cpu" not in argv[argv.index("finetune/grpo.py") :]
    assert accelerate_launcher(argv) == "simple"


@pytest.mark.parametrize(
    "config", [None, "recipes/accelerate/ddp_multinode.yaml"], ids=["one-process-config", "multi-gpu-config"]
)
def test_several_cpu_nodes_are_one_multi_process_cpu_launch(tmp_path: Path, config: str | None) -> None:
    argv = launched(tmp_path, *([config] if config else []), "--", "--max_steps", "1", nodes=2)
    assert "--cpu" not in argv  # accelerate's MULTI_CPU launch: two unjoined runs without MPI
    assert value(argv, "--num_machines") == "2" and value(argv, "--num_processes") == "2"
    assert value(argv, "--machine_rank") == "0" and value(argv, "--main_process_ip") == "vt1"
    script = argv[argv.index("finetune/grpo.py") :]
    assert script[:2] == ["finetune/grpo.py", RECIPE]
    assert value(script, "--use_cpu") == "true"  # the processes join over gloo, on the CPU
    assert script[-2:] == ["--max_steps", "1"]  # the user's overrides come last (they win)
    assert accelerate_launcher(argv) == "multi-process"  # torchrun: the processes join


def test_deepspeed_config_keeps_its_own_launch_on_cpu_nodes(tmp_path: Path) -> None:
    argv = launched(tmp_path, "recipes/accelerate/zero3_multinode.yaml", nodes=2)
    assert "--cpu" not in argv and "--multi_gpu" not in argv
    assert value(argv[argv.index("finetune/grpo.py") :], "--use_cpu") == "true"


def test_gpu_nodes_are_unchanged(tmp_path: Path) -> None:
    argv = launched(tmp_path, "recipes/accelerate/ddp_multinode.yaml", nodes=2, gpus=4)
    assert "--cpu" not in argv and "--multi_gpu" not in argv
    assert value(argv, "--num_processes") == "8"
    assert "--use_cpu" not in argv[argv.index("finetune/grpo.py") :]


def test_a_recipe_that_includes_its_accelerate_config_launches_with_it(tmp_path: Path) -> None:
    """The batch script reads the recipe as the entry point does: a key set by an included base counts."""
    recipe = tmp_path / "inherits.yaml"
    recipe.write_text(f"include: {REPO_ROOT / RECIPE}\nmax_steps: 2\n")
    argv = launched(tmp_path, recipe=str(recipe))
    assert value(argv, "--config_file") == "recipes/accelerate/single.yaml"  # from the base, found from the repo
    assert argv[argv.index("finetune/grpo.py") + 1] == str(recipe)


def test_values_are_arguments_never_shell(tmp_path: Path) -> None:
    """A run directory and override values holding `$(...)`, backticks, quotes and spaces reach the entry
    point as single arguments, and nothing in them runs (in the batch step's directory or the job's)."""
    run_dir = str(tmp_path / "run '$(id>PWNED)' `id>PWNED2`")
    odd = ['x"$(id>PWNED3)" two words', "it's; id>PWNED4"]
    argv = launched(tmp_path, "--", "--run_name", odd[0], "--hub_model_id", odd[1], nodes=2, VERITUNE_RUN_DIR=run_dir)
    script = argv[argv.index("finetune/grpo.py") :]
    assert script == [
        *("finetune/grpo.py", RECIPE, "--output_dir", run_dir, "--resume_from_checkpoint", "auto"),
        *("--use_cpu", "true", "--run_name", odd[0], "--hub_model_id", odd[1]),
    ]
    assert value(argv, "--machine_rank") == "0" and argv.index("--machine_rank") < argv.index("finetune/grpo.py")
    assert list(tmp_path.rglob("PWNED*")) == [] and not list(REPO_ROOT.glob("PWNED*"))
