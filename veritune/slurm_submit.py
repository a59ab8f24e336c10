"""``veritune slurm submit``: chain build → train → eval jobs with ``--dependency=afterok``.

    veritune slurm submit --entry grpo --recipe recipes/qwen3vl_oric.yaml --nodes 1 --gpus-per-node 4 \\
        --build "oric --annotations ... --image-root ... --out data/oric/oric_train.json" \\
        --eval-benchmarks oric_bench_r1,pope --eval-data-root data/benchmarks

Each stage is one of the generic scripts in ``slurm/``; the run directory is chosen here and passed to
every job, so the eval job knows where the trained model is. ``--dry-run`` prints the sbatch commands.
The eval job asks for one GPU when training has GPUs (``--eval-gpus`` sets the count; 0: a CPU node).

``--nodes`` counts training nodes. A recipe that generates with a vLLM server (``use_vllm: true``,
``vllm_mode: server``) gets one node more for the server (``veritune.slurm_layout``; slurm/train.sbatch
runs it on the job's last node and waits for its /health endpoint before training).

The jobs run in the directory the submission was made from (relative recipe, data and run paths keep their
meaning), and find veritune wherever that is: every job is given ``VERITUNE_PYTHON`` (this Python),
``VERITUNE_BIN`` (the ``veritune`` beside it) and ``VERITUNE_REPO`` (the repository of the scripts, which
holds ``finetune/``), unless the submitting shell already sets them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.recipe_file import read_recipe, recipe_path_value
from core.secrets import is_secret_key, secret_env_var

# slurm/*.sbatch of the repository holding this package: given to sbatch as absolute paths, so that a
# submission works from any directory.
SLURM_DIR = Path(__file__).resolve().parent.parent / "slurm"


def sbatch_script(name: str) -> str:
    """The absolute path of ``slurm/<name>`` beside this package.

    Raises:
        UserError: the script is not there (veritune installed without its repository's slurm/ folder).
    """
    path = SLURM_DIR / name
    if not path.is_file():
        raise UserError(
            f"{path} not found: veritune slurm submit runs the repository's slurm/ scripts; "
            "use veritune from a checkout of its repository (pip install -e .)"
        )
    return str(path)


def job_environment(run_dir: str) -> str:
    """sbatch's ``--export`` value for every job of a submission: the submitting environment, the run
    directory, and where veritune is (module docstring); a value already set in the environment is kept.

    Raises:
        UserError: one of those paths holds a comma, which ``--export`` would split.
    """
    executable = Path(sys.executable)
    found = {
        "VERITUNE_PYTHON": str(executable),
        "VERITUNE_BIN": str(executable.parent / "veritune") if (executable.parent / "veritune").is_file() else None,
        "VERITUNE_REPO": str(SLURM_DIR.parent),
    }
    exported = {"VERITUNE_RUN_DIR": run_dir}
    exported |= {key: value for key, value in found.items() if value and not os.environ.get(key)}
    for key, value in exported.items():
        if "," in value:
            raise UserError(f"{key}={value}: sbatch --export cannot pass a path with a comma; move or rename it")
    return ",".join(["ALL", *(f"{key}={value}" for key, value in exported.items())])


def _sbatch(command: list[str], dry_run: bool, placeholder: str) -> str:
    print("$ " + shlex.join(command), flush=True)
    if dry_run:
        return placeholder
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError("sbatch not found: run this on a Slurm login node (or use --dry-run)") from None
    if result.returncode != 0:
        raise UserError(
            f"sbatch failed: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}"
        )
    return result.stdout.strip().split(";")[0]


def _split(flag: str, text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as err:
        raise UserError(f"{flag} {text!r}: {err} (check its quotes)") from None


def _entry_types(entry: str) -> tuple[type, ...]:
    if entry == "grpo":
        from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig

        return GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig

    return DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig


# Checks that depend on the number of processes; without --gpus-per-node that number is not known here.
_WORLD_SIZE_CHECKS = ("multiple of num_generations", "global_batch_size:")


def validate_recipe(entry: str, recipe: str, overrides: list[str], processes: int | None) -> Any:
    """Parse ``recipe`` and ``overrides`` exactly as ``finetune/<entry>.py`` will (same parser, same value
    checks), as on ``processes`` processes; returns the script arguments.

    Raises:
        UserError: the recipe or an override is invalid, or the recipe is for the other entry point.
    """
    from finetune.recipe import load_recipe, parse_recipe, valid_keys

    types = _entry_types(entry)
    other = "dpo" if entry == "grpo" else "grpo"
    keys = {str(key) for key in read_recipe(recipe)}
    if not keys <= valid_keys(types) and keys <= valid_keys(_entry_types(other)):
        raise UserError(
            f"--entry {entry}: {recipe} is a {other} recipe "
            f"(it sets {', '.join(sorted(keys - valid_keys(types))[:3])}); use --entry {other}"
        )
    load_recipe(recipe, types)
    _check_override_keys(overrides, valid_keys(types))
    config_type = types[1]
    own = config_type.__dict__.get("world_size")
    if processes is not None:  # as the job will see it: nodes x GPUs per node
        config_type.world_size = property(lambda self: processes)  # type: ignore[method-assign,assignment]
    try:
        # Parsed as on a CPU: bf16/fp16 recipes are checked here, on a login node without GPUs.
        script_args, *_ = parse_recipe([recipe, *overrides, "--use_cpu", "true"], types)
    except UserError as err:
        if processes is not None or not any(text in str(err) for text in _WORLD_SIZE_CHECKS):
            raise
        print(f"note: not checked without --gpus-per-node: {str(err).split(';')[0]}")
        return None
    finally:
        if own is not None:
            config_type.world_size = own  # type: ignore[method-assign]
        elif "world_size" in config_type.__dict__:
            del config_type.world_size
    return script_args


def _check_override_keys(overrides: list[str], keys: set[str]) -> None:
    """Each override is ``--key value`` with a key the entry point knows (checked on its own, so a typo is
    caught even when the full parse stops earlier at a check that needs the process count); a secret is refused:
    sbatch's arguments are public on the cluster."""
    from finetune.recipe import closest_key

    if overrides and not overrides[0].startswith("--"):
        key = overrides[0].split("=", 1)[0].lstrip("-").replace("-", "_")
        suggestion = key if key in keys else closest_key(key, keys)
        unknown = "" if key in keys else f"unknown key '{key}'; "
        example = f"--{suggestion} VALUE" if suggestion else "--learning_rate 1e-6"
        raise UserError(f'--override {overrides[0]!r}: {unknown}overrides are --key value pairs (e.g. "{example}")')
    for token in overrides:
        if not token.startswith("--"):
            continue
        key = token[2:].split("=", 1)[0].replace("-", "_")
        if is_secret_key(key):
            raise UserError(
                f"--override: {key}: a secret is not passed to sbatch (a job's arguments are shown to every user of "
                f"the cluster); export {secret_env_var(key)} instead (the jobs inherit the environment)"
            )
        if key not in keys and not (key.startswith("no_") and key[3:] in keys):
            suggestion = closest_key(key, keys)
            raise UserError(
                f"--override: unknown key '{key}'" + (f" (did you mean '{suggestion}'?)" if suggestion else "")
            )


def validate(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Everything a submission needs, checked here before any job is submitted; returns the build
    arguments and the recipe overrides, split."""
    from finetune.recipe import check_benchmark_names

    if args.nodes < 1:
        raise UserError(f"--nodes: must be at least 1, got {args.nodes}")
    if args.gpus_per_node < 0:
        raise UserError(f"--gpus-per-node: must be 0 (the sbatch script's default) or more, got {args.gpus_per_node}")
    if not Path(args.recipe).is_file():
        raise UserError(f"recipe not found: {args.recipe}")
    build = _split("--build", args.build) if args.build else []
    overrides = _split("--override", args.override) if args.override else []
    # The flags' own checks come before the recipe's paths, so none of them is masked by an accelerate config.
    if args.eval_gpus is not None and args.eval_gpus < 0:
        raise UserError(f"--eval-gpus: must be 0 (a CPU node) or more, got {args.eval_gpus}")
    if args.eval_benchmarks:
        check_benchmark_names(args.eval_benchmarks, "--eval-benchmarks")
        if not args.eval_data_root:
            raise UserError("--eval-benchmarks needs --eval-data-root")
    elif args.eval_gpus is not None:
        raise UserError("--eval-gpus: there is no eval job without --eval-benchmarks")
    if not args.dry_run and shutil.which("sbatch") is None:
        raise UserError("sbatch not found: run this on a Slurm login node (or use --dry-run)")
    if args.accelerate_config and not Path(args.accelerate_config).is_file():
        raise UserError(
            f"--accelerate-config: {args.accelerate_config} not found in {Path.cwd()} (see recipes/accelerate/)"
        )
    processes = args.nodes * args.gpus_per_node if args.gpus_per_node else None
    script_args = validate_recipe(args.entry, args.recipe, overrides, processes)
    check_wandb_login(args.recipe, overrides)
    if script_args is not None and not args.accelerate_config and not script_args.accelerate_config:
        raise UserError(f"{args.recipe} names no accelerate_config; pass --accelerate-config")
    return build, overrides


def check_wandb_login(recipe: str, overrides: list[str]) -> None:
    """Refuse, before any job is submitted, a run whose ``report_to`` names wandb while W&B has no credentials
    here (the jobs read the same home directory and environment).

    Raises:
        UserError: one line saying how to log in or go offline.
    """
    from core.wandb_login import require_wandb_login
    from finetune.recipe import recipe_report_to

    require_wandb_login(recipe_report_to([recipe, *overrides]), f"{recipe}: report_to names wandb")


def _recipe_accelerate_config(recipe: str) -> str | None:
    """The recipe's ``accelerate_config`` resolved as every entry point resolves it (finetune.recipe), when the
    path as written is not found from here (then the train job is given the resolved path)."""
    resolved = recipe_path_value(recipe, "accelerate_config")
    return None if resolved == read_recipe(recipe).get("accelerate_config") else resolved


def recipe_output_dir(recipe: str, overrides: list[str]) -> str | None:
    """Where the training run writes, as the entry script decides it: an ``--output_dir`` override, else the
    recipe's ``output_dir`` (the path the README's ``eval run --model`` lines use); None when neither is set."""
    for index, arg in enumerate(overrides):
        flag, eq, value = arg.partition("=")
        if flag == "--output_dir":
            return value if eq else (overrides[index + 1] if index + 1 < len(overrides) else None)
    value = read_recipe(recipe).get("output_dir")
    return value if isinstance(value, str) and value else None


def eval_gpus(args: argparse.Namespace) -> int:
    """The eval job's GPUs: ``--eval-gpus``, else one when training has GPUs (``veritune eval run`` is one
    process, and it computes on one device), else none."""
    if args.eval_gpus is not None:
        return args.eval_gpus
    return 1 if args.gpus_per_node else 0


def submit(args: argparse.Namespace) -> dict[str, str]:
    """Validate the submission, then submit the chain; returns the job id of each stage."""
    build, overrides = validate(args)
    stages = ["train", *(["build"] if args.build else []), *(["eval"] if args.eval_benchmarks else [])]
    scripts = {stage: sbatch_script(f"{stage}.sbatch") for stage in stages}  # all found before any submission
    run_dir = args.run_dir or recipe_output_dir(args.recipe, overrides)
    run_dir = run_dir or f"{args.run_root}/{Path(args.recipe).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    common = [*args.sbatch_arg, f"--export={job_environment(run_dir)}"]
    if not args.dry_run and not any(flag.startswith(("--output", "-o")) for flag in args.sbatch_arg):
        Path("logs").mkdir(exist_ok=True)  # the scripts' #SBATCH --output=logs/...: Slurm does not create it
    from veritune.slurm_layout import vllm_server_layout

    server = vllm_server_layout(args.recipe, overrides)
    nodes = args.nodes + 1 if server else args.nodes
    if server:
        print(
            f"vLLM server mode: {args.nodes} training node(s) + 1 node for `trl vllm-serve` {server.model} "
            f"(port {server.port}) = --nodes={nodes}"
        )
    jobs: dict[str, str] = {}
    dependency: list[str] = []
    if args.build:
        jobs["build"] = _sbatch(["sbatch", "--parsable", *common, scripts["build"], *build], args.dry_run, "BUILD_JOB")
        dependency = [f"--dependency=afterok:{jobs['build']}"]
    resources = [f"--nodes={nodes}"] + ([f"--gpus-per-node={args.gpus_per_node}"] if args.gpus_per_node else [])
    train = ["sbatch", "--parsable", *common, *dependency, *resources, scripts["train"], args.entry, args.recipe]
    accelerate_config = args.accelerate_config or _recipe_accelerate_config(args.recipe)
    if accelerate_config:
        train.append(accelerate_config)
    if overrides:
        train += ["--", *overrides]
    jobs["train"] = _sbatch(train, args.dry_run, "TRAIN_JOB")
    if args.eval_benchmarks:
        evaluation = [
            "sbatch",
            "--parsable",
            *common,
            f"--dependency=afterok:{jobs['train']}",
            *([f"--gpus-per-node={eval_gpus(args)}"] if eval_gpus(args) else []),
            scripts["eval"],
            "run",
            run_dir,
            args.eval_benchmarks,
            args.eval_data_root,
            f"{run_dir}/eval/final",
        ]
        jobs["eval"] = _sbatch(evaluation, args.dry_run, "EVAL_JOB")
    print(f"run directory: {run_dir}")
    print("jobs: " + ", ".join(f"{stage} {job}" for stage, job in jobs.items()))
    return jobs


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune slurm submit``."""
    from core.cli_help import command_help

    slurm = subparsers.add_parser("slurm", help=command_help(None, "slurm"))
    commands = slurm.add_subparsers(dest="slurm_command", metavar="COMMAND")
    parser = commands.add_parser("submit", help="chain build -> train -> eval jobs with afterok dependencies")
    parser.add_argument(
        "--entry", choices=["grpo", "dpo"], required=True, help="training entry point (finetune/ENTRY.py)"
    )
    parser.add_argument("--recipe", required=True, help="the recipe YAML")
    parser.add_argument("--accelerate-config", help="default: the recipe's accelerate_config")
    parser.add_argument(
        "--nodes", type=int, default=1, help="training nodes (a vLLM server-mode recipe gets one more, for the server)"
    )
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs of each training node; 0: CPU nodes")
    parser.add_argument("--override", help='recipe overrides, e.g. "--learning_rate 1e-6"')
    parser.add_argument("--build", help="arguments of a `veritune build` job to run first")
    parser.add_argument("--eval-benchmarks", help="comma-separated benchmarks to run on the trained model")
    parser.add_argument("--eval-data-root", help="benchmark files for --eval-benchmarks (layout: docs/EVALUATION.md)")
    parser.add_argument(
        "--eval-gpus",
        type=int,
        help="GPUs of the eval job, one node (default: 1 when --gpus-per-node is set, else 0)",
    )
    parser.add_argument("--run-root", default="outputs", help="where a run goes when the recipe names no output_dir")
    parser.add_argument(
        "--run-dir",
        help="run directory (default: the recipe's output_dir, else RUN_ROOT/<recipe>-<time>)",
    )
    parser.add_argument(
        "--sbatch-arg", action="append", default=[], help="extra sbatch flag for every job (repeatable)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch commands without submitting")
    parser.set_defaults(handler=lambda a: submit(a) and 0)
    slurm.set_defaults(handler=lambda a: slurm.print_help() or 2)
