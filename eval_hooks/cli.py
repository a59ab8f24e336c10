"""``veritune eval run`` (generate and score), ``eval watch`` (each checkpoint of a run as it appears) and
``eval score`` (re-score a predictions file, no model)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from eval_hooks.evaluate import evaluate, headline_metrics, parse_benchmark_names, prepare_benchmarks, rescore
from eval_hooks.registry import BENCHMARKS
from veritune.errors import UserError

STRICT_HELP = ("score the raw responses exactly as the official script does, with no veritune normalisation before it "
               "(AMBER discriminative: only the exact responses Yes / No count); no judge")


def _data_overrides(values: list[str]) -> dict[str, Path]:
    overrides = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--data {value!r}: expected BENCHMARK=PATH")
        overrides[name] = Path(path)
    return overrides


def summary_table(results: dict[str, dict[str, Any]]) -> str:
    """A plain-text table: one row per benchmark and headline metric, with the item counts."""
    rows = [("benchmark", "items", "answered", "missing img", "metric", "value")]
    for name, result in results.items():
        counts = result.get("counts", {})
        first = (name, str(counts.get("items", "")), str(counts.get("predicted", "")), str(counts.get("missing_images", 0)))
        for index, (metric, value) in enumerate(headline_metrics(result).items()):
            rows.append((*(first if index == 0 else ("", "", "", "")), metric, f"{value:.4g}"))
        if not headline_metrics(result):
            rows.append((*first, "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i in (1, 2, 3, 5) else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("LLM judge (optional: resolves answers the rules cannot; HallusionBench: judges every answer against gt_answer_details)")
    group.add_argument("--judge-base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    group.add_argument("--judge-model", help="model name sent to the endpoint (recorded with the results)")
    group.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    group.add_argument("--judge-cache", type=Path, default=Path("outputs/cache/judge.sqlite"), help="answer cache (a rerun sends no request)")


def _judge(args: argparse.Namespace) -> Any:
    if not (args.judge_base_url or args.judge_model):
        return None
    if not (args.judge_base_url and args.judge_model):
        raise UserError("--judge-base-url and --judge-model: give both to use an LLM judge")
    if args.strict_official:  # refused before any model loads
        raise UserError("--strict-official: scores the raw responses as the official script does; drop the --judge-* options")
    from eval_hooks.judge import AnswerJudge

    return AnswerJudge(args.judge_base_url, args.judge_model, cache_path=args.judge_cache, api_key_env=args.judge_api_key_env)


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmarks", required=True, help=f"comma-separated: {', '.join(BENCHMARKS)}, or a dotted path to a Benchmark")
    parser.add_argument("--data-root", type=Path, help="directory holding every benchmark's files (layout: docs/EVALUATION.md)")
    parser.add_argument("--data", action="append", default=[], metavar="BENCHMARK=PATH", help="a benchmark's file or folder (repeatable)")
    parser.add_argument("--image-root", type=Path, help="images of the --data files")
    parser.add_argument("--limit", type=int, help="at most N questions per benchmark (quick checks)")
    parser.add_argument("--batch-size", type=int, default=8, help="items per generate call (per process); vLLM: try 256")
    parser.add_argument("--max-new-tokens", type=int, help="generation budget for every item (default: each benchmark's own)")
    parser.add_argument("--backend", default="transformers", choices=["transformers", "vllm"], help="vllm only when installed")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    parser.add_argument("--strict-official", action="store_true", help=STRICT_HELP)
    _add_judge_arguments(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the eval commands."""
    run = subparsers.add_parser("run", help="generate answers with a model and score them")
    run.add_argument("--model", required=True, help="checkpoint directory or hub id")
    run.add_argument("--out", type=Path, required=True, help="results go to OUT/<benchmark>/{predictions.jsonl,metrics.json}")
    _add_data_arguments(run)
    run.add_argument("--force", action="store_true", help="start over predictions in OUT made by another model, data or settings")
    run.set_defaults(handler=_run)

    watcher = subparsers.add_parser("watch", help="evaluate each new checkpoint of a training run as it appears")
    watcher.add_argument("run_dir", type=Path, help="the training run's output_dir (holds checkpoint-N folders)")
    _add_data_arguments(watcher)
    watcher.add_argument("--interval", type=float, default=60.0, help="seconds between looks for new checkpoints")
    watcher.add_argument("--timeout", type=float, help="stop when no new checkpoint has appeared for this many seconds")
    watcher.add_argument("--once", action="store_true", help="evaluate the checkpoints there now, then exit")
    watcher.set_defaults(handler=_watch)

    score = subparsers.add_parser("score", help="score a predictions file (no model is loaded)")
    score.add_argument("benchmark", help=", ".join(BENCHMARKS))
    score.add_argument("--data", type=Path, required=True, help="the benchmark's file or folder")
    score.add_argument("--predictions", type=Path, required=True, help="JSONL of {id, prediction}")
    score.add_argument("--image-root", type=Path)
    score.add_argument("--limit", type=int, help="the --limit the predictions were made with")
    score.add_argument("--strict-official", action="store_true", help=STRICT_HELP)
    _add_judge_arguments(score)
    score.set_defaults(handler=_score)


def _prepare(args: argparse.Namespace) -> list:
    names = parse_benchmark_names(args.benchmarks)
    return prepare_benchmarks(names, data_root=args.data_root, data=_data_overrides(args.data), image_root=args.image_root,
                              limit=args.limit, max_new_tokens=args.max_new_tokens, strict_official=args.strict_official)  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    from accelerate import PartialState

    from eval_hooks.runner import get_backend

    prepared = _prepare(args)  # before the model loads: a wrong path fails fast
    judge = _judge(args)
    from eval_hooks.evaluate import require_judges

    require_judges([entry.name for entry in prepared], judge)  # judged suites: refused before the model loads
    backend = get_backend(args.backend, args.model, args.dtype)
    results = evaluate(backend, prepared, args.out, batch_size=args.batch_size, judge=judge, force=args.force)
    if PartialState().is_main_process:
        print(summary_table(results))
        print(f"results: {args.out}/<benchmark>/metrics.json")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from eval_hooks.watch import watch

    if not args.run_dir.is_dir():
        raise UserError(f"run directory not found: {args.run_dir}")
    from eval_hooks.evaluate import require_judges

    prepared, judge = _prepare(args), _judge(args)
    require_judges([entry.name for entry in prepared], judge)
    steps = watch(args.run_dir, prepared, batch_size=args.batch_size, interval=args.interval, once=args.once,
                  idle_timeout=args.timeout, backend=args.backend, dtype=args.dtype, judge=judge)  # fmt: skip
    print(f"evaluated checkpoints: {', '.join(map(str, steps)) or 'none new'}")
    return 0


def _score(args: argparse.Namespace) -> int:
    result = rescore(args.benchmark, args.data, args.predictions, args.image_root, args.limit, judge=_judge(args), strict_official=args.strict_official)
    print(json.dumps(result, indent=2))
    return 0
