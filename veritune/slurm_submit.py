"""``veritune slurm submit``: chain build → train → eval jobs with ``--dependency=afterok``.

    veritune slurm submit --entry grpo --recipe recipes/qwen3vl_oric.yaml --nodes 1 --gpus-per-node 4 \\
        --build "oric --annotations ... --image-root ... --out data/oric/oric_train.json" \\
        --eval-benchmarks oric_bench_r1,pope --eval-data-root data/benchmarks

Each stage is one of the generic scripts in ``slurm/``; the run directory is chosen here and passed to
every job, so the eval job knows where the trained model is. ``--dry-run`` prints the sbatch commands.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import time
from pathlib import Path

from veritune.errors import UserError


def _sbatch(command: list[str], dry_run: bool, placeholder: str) -> str:
    print("$ " + shlex.join(command), flush=True)
    if dry_run:
        return placeholder
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError("sbatch not found: run this on a Slurm login node (or use --dry-run)") from None
    if result.returncode != 0:
        raise UserError(f"sbatch failed: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}")
    return result.stdout.strip().split(";")[0]


def submit(args: argparse.Namespace) -> dict[str, str]:
    """Submit the chain; returns the job id of each stage."""
    if not Path(args.recipe).is_file():
        raise UserError(f"recipe not found: {args.recipe}")
    run_dir = args.run_dir or f"{args.run_root}/{Path(args.recipe).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    common = [*args.sbatch_arg, f"--export=ALL,VERITUNE_RUN_DIR={run_dir}"]
    jobs: dict[str, str] = {}
    dependency: list[str] = []
    if args.build:
        jobs["build"] = _sbatch(["sbatch", "--parsable", *common, "slurm/build.sbatch", *shlex.split(args.build)], args.dry_run, "BUILD_JOB")
        dependency = [f"--dependency=afterok:{jobs['build']}"]
    resources = [f"--nodes={args.nodes}"] + ([f"--gpus-per-node={args.gpus_per_node}"] if args.gpus_per_node else [])
    train = ["sbatch", "--parsable", *common, *dependency, *resources, "slurm/train.sbatch", args.entry, args.recipe]
    if args.accelerate_config:
        train.append(args.accelerate_config)
    if args.override:
        train += ["--", *shlex.split(args.override)]
    jobs["train"] = _sbatch(train, args.dry_run, "TRAIN_JOB")
    if args.eval_benchmarks:
        if not args.eval_data_root:
            raise UserError("--eval-benchmarks needs --eval-data-root")
        evaluation = ["sbatch", "--parsable", *common, f"--dependency=afterok:{jobs['train']}", "slurm/eval.sbatch", "run",
                      run_dir, args.eval_benchmarks, args.eval_data_root, f"{run_dir}/eval/final"]  # fmt: skip
        jobs["eval"] = _sbatch(evaluation, args.dry_run, "EVAL_JOB")
    print(f"run directory: {run_dir}")
    print("jobs: " + ", ".join(f"{stage} {job}" for stage, job in jobs.items()))
    return jobs


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune slurm submit``."""
    slurm = subparsers.add_parser("slurm", help="submit veritune jobs to a Slurm cluster")
    commands = slurm.add_subparsers(dest="slurm_command", metavar="COMMAND")
    parser = commands.add_parser("submit", help="chain build -> train -> eval jobs with afterok dependencies")
    parser.add_argument("--entry", choices=["grpo", "dpo"], required=True, help="training entry point (finetune/ENTRY.py)")
    parser.add_argument("--recipe", required=True, help="the recipe YAML")
    parser.add_argument("--accelerate-config", help="default: the recipe's accelerate_config")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=0)
    parser.add_argument("--override", help='recipe overrides, e.g. "--learning_rate 1e-6"')
    parser.add_argument("--build", help="arguments of a `veritune build` job to run first")
    parser.add_argument("--eval-benchmarks", help="comma-separated benchmarks to run on the trained model")
    parser.add_argument("--eval-data-root", help="benchmark files for --eval-benchmarks (layout: docs/EVALUATION.md)")
    parser.add_argument("--run-root", default="outputs")
    parser.add_argument("--run-dir", help="explicit run directory (default: RUN_ROOT/<recipe>-<time>)")
    parser.add_argument("--sbatch-arg", action="append", default=[], help="extra sbatch flag for every job (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch commands without submitting")
    parser.set_defaults(handler=lambda a: submit(a) and 0)
    slurm.set_defaults(handler=lambda a: slurm.print_help() or 2)
