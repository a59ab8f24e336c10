"""``veritune eval run`` (generate and score) and ``veritune eval score`` (re-score, no model)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eval_hooks.evaluate import evaluate, rescore
from eval_hooks.registry import BENCHMARKS
from veritune.errors import UserError


def _data_overrides(values: list[str]) -> dict[str, Path]:
    overrides = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            raise UserError(f"--data {value!r}: expected BENCHMARK=PATH")
        overrides[name] = Path(path)
    return overrides


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the eval commands."""
    run = subparsers.add_parser("run", help="generate answers with a model and score them")
    run.add_argument("--model", required=True, help="checkpoint directory or hub id")
    run.add_argument("--benchmarks", required=True, help=f"comma-separated: {', '.join(BENCHMARKS)}")
    run.add_argument("--data-root", type=Path, help="directory holding every benchmark's files (docs/EVALUATION.md)")
    run.add_argument("--data", action="append", default=[], metavar="BENCHMARK=PATH", help="a benchmark's file or folder")
    run.add_argument("--image-root", type=Path, help="images for the --data files")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--limit", type=int, help="at most N questions per benchmark")
    run.add_argument("--batch-size", type=int, default=8)
    run.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    run.set_defaults(handler=_run)

    watcher = subparsers.add_parser("watch", help="evaluate each new checkpoint of a training run")
    watcher.add_argument("run_dir", type=Path)
    watcher.add_argument("--benchmarks", required=True)
    watcher.add_argument("--data-root", type=Path)
    watcher.add_argument("--data", action="append", default=[], metavar="BENCHMARK=PATH")
    watcher.add_argument("--image-root", type=Path)
    watcher.add_argument("--limit", type=int)
    watcher.add_argument("--batch-size", type=int, default=8)
    watcher.add_argument("--interval", type=float, default=60.0, help="seconds between looks for new checkpoints")
    watcher.add_argument("--timeout", type=float, help="give up after this many seconds")
    watcher.add_argument("--once", action="store_true", help="one pass over the existing checkpoints, then exit")
    watcher.set_defaults(handler=_watch)

    score = subparsers.add_parser("score", help="score a predictions file (no model is loaded)")
    score.add_argument("benchmark", help=", ".join(BENCHMARKS))
    score.add_argument("--data", type=Path, required=True, help="the benchmark's file or folder")
    score.add_argument("--predictions", type=Path, required=True, help="JSONL of {id, prediction}")
    score.add_argument("--image-root", type=Path)
    score.add_argument("--limit", type=int, help="the --limit the predictions were made with")
    score.set_defaults(handler=_score)


def _run(args: argparse.Namespace) -> int:
    from eval_hooks.runner import load_model

    names = [name.strip() for name in args.benchmarks.split(",") if name.strip()]
    model, processor = load_model(args.model, args.dtype)
    results = evaluate(
        model, processor, names, args.out, data_root=args.data_root, data=_data_overrides(args.data),
        image_root=args.image_root, limit=args.limit, batch_size=args.batch_size,
    )  # fmt: skip
    for name, result in results.items():
        headline = {k: round(v, 2) for k, v in result["metrics"].items() if "/" not in k or k.startswith("macro/")}
        print(f"{name}: {json.dumps(headline)}  -> {args.out / name / 'metrics.json'}")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from eval_hooks.watch import watch

    if not args.run_dir.is_dir():
        raise UserError(f"run directory not found: {args.run_dir}")
    names = [name.strip() for name in args.benchmarks.split(",") if name.strip()]
    steps = watch(args.run_dir, names, data_root=args.data_root, data=_data_overrides(args.data), image_root=args.image_root,
                  limit=args.limit, batch_size=args.batch_size, interval=args.interval, once=args.once, timeout=args.timeout)  # fmt: skip
    print(f"evaluated checkpoints: {steps or 'none new'}")
    return 0


def _score(args: argparse.Namespace) -> int:
    print(json.dumps(rescore(args.benchmark, args.data, args.predictions, args.image_root, args.limit), indent=2))
    return 0
