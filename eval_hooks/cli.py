"""``veritune eval run`` (generate and score), ``eval watch`` (each checkpoint of a run as it appears) and
``eval score`` (re-score predictions, no model)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from core.cli_help import add_llm_arguments, command_help, llm_client_options
from core.errors import UserError
from core.hub import require_model
from core.images import BLIND_FILL
from core.io import atomic_write_json, hold_output_lock
from core.lock import hold_lock
from eval_hooks.coverage import UNRESOLVED_LIMIT, benchmark_label, check_images, coverage_text
from eval_hooks.evaluate import evaluate, rescore
from eval_hooks.plan import EvalPlan
from eval_hooks.prepare import PreparedBenchmark
from eval_hooks.registry import BENCHMARKS
from eval_hooks.results import (
    METRICS_FILE,
    RESULTS_FILE,
    headline_metrics,
    kept_results,
    read_results_file,
    results_record,
)
from eval_hooks.selection import DEFAULT_LIMIT_MODE, DEFAULT_LIMIT_SEED, LIMIT_MODES

STRICT_HELP = "score the raw responses exactly as the official script does: no normalisation, no judge"


def _percent(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def summary_table(results: dict[str, dict[str, Any]]) -> str:
    """A plain-text table: one row per benchmark and headline metric, with its coverage (answered of expected
    items, naming the limit's questions or pairs where they differ: :func:`coverage_text`; their share, items
    with missing images, the share of answers no grader could read) and the marks of
    :func:`benchmark_label`. Every number is printed with two decimals (the metrics, like the shares, are in
    percent unless the benchmark's own unit is a score)."""
    rows = [("benchmark", "answered", "coverage %", "missing img", "unresolved %", "metric", "value")]
    for name, result in results.items():
        coverage = result.get("coverage") or {}
        counts = result.get("counts", {})
        if not coverage:  # a result written before coverage was recorded
            coverage = {"answered": counts.get("predicted", ""), "expected": counts.get("items", "")}
        first = (
            benchmark_label(name, result),
            coverage_text(coverage),
            _percent(coverage.get("answered_share")),
            str(coverage.get("missing_images", counts.get("missing_images", 0))),
            _percent(coverage.get("unresolved_share")),
        )
        blank = ("",) * len(first)
        headline = headline_metrics(result)
        for index, (metric, value) in enumerate(headline.items()):
            rows.append((*(first if index == 0 else blank), metric, _percent(value)))
        if not headline:
            rows.append((*first, "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {1, 2, 3, 4, 6}
    lines = [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_blind_fill(text: str) -> tuple[int, int, int]:
    """``"128,128,128"`` -> ``(128, 128, 128)``: the blind control's colour; anything but three whole
    numbers from 0 to 255 is a one-line error naming ``--blind-fill``."""
    parts = [part.strip() for part in str(text).split(",")]
    if len(parts) != 3 or not all(part.isascii() and part.isdigit() and int(part) <= 255 for part in parts):
        raise UserError(f"--blind-fill {text!r}: expected R,G,B, three whole numbers from 0 to 255, e.g. 128,128,128")
    red, green, blue = (int(part) for part in parts)
    return red, green, blue


def blind_fill_of(args: argparse.Namespace) -> tuple[int, int, int] | None:
    """The colour of ``--blind``'s blanks (``--blind-fill``, else mid-grey); None without ``--blind``."""
    if args.blind_fill is not None and not args.blind:
        raise UserError("--blind-fill: sets the colour of --blind's blank images; add --blind")
    if not args.blind:
        return None
    return parse_blind_fill(args.blind_fill) if args.blind_fill is not None else BLIND_FILL


def _add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    add_llm_arguments(
        parser,
        "optional judge: resolves answers the rules cannot; HallusionBench: judges every answer "
        "against gt_answer_details",
        cache="outputs/cache/judge.sqlite",
        max_tokens=8,
        model_help="judge model sent to the endpoint (recorded with the results)",
        aliases="judge",
    )


def _judge(args: argparse.Namespace) -> Any:
    if not (args.llm_base_url or args.llm_model):
        return None
    if not (args.llm_base_url and args.llm_model):
        raise UserError("--llm-base-url and --llm-model: give both to use an LLM judge")
    if args.strict_official:  # refused before any model loads
        raise UserError(
            "--strict-official: scores the raw responses as the official script does; drop the --llm-* judge options"
        )
    from eval_hooks.judge import AnswerJudge

    return AnswerJudge(args.llm_base_url, args.llm_model, **llm_client_options(args))


def _check_judge(judge: Any) -> None:
    """Reach the judge's endpoint before any model loads, as the builders do (``ChatClient.check_endpoint``: at
    once on a cache without its answers, else at the first request the cache does not answer)."""
    if judge is not None:
        judge.client.check_endpoint("checked before generating: nothing was evaluated")


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    _add_location_arguments(parser)
    parser.add_argument(
        "--batch-size", type=int, default=8, help="items per generate call (per process); vLLM: try 256"
    )
    parser.add_argument(
        "--max-new-tokens", type=int, help="generation budget for every item (default: each benchmark's own)"
    )
    parser.add_argument(
        "--backend", default="transformers", choices=["transformers", "vllm"], help="vllm only when installed"
    )
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"], help="model weights' dtype"
    )
    parser.add_argument("--strict-official", action="store_true", help=STRICT_HELP)
    _add_judge_arguments(parser)


def _add_location_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = f"benchmarks: {', '.join(BENCHMARKS)}"
    parser.add_argument(
        "--benchmarks",
        required=True,
        help="comma-separated benchmarks (listed below) or dotted paths; NAME:N asks N questions of one",
    )
    parser.add_argument(
        "--data-root", type=Path, help="directory holding every benchmark's files (layout: docs/EVALUATION.md)"
    )
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="BENCHMARK=PATH",
        help="a benchmark's file or folder, instead of its --data-root layout (repeatable)",
    )
    parser.add_argument(
        "--image-root",
        action="append",
        metavar="PATH or BENCHMARK=PATH",
        help="images of the --data files: a PATH for every benchmark, or BENCHMARK=PATH for one (repeatable)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        help="at most N questions per benchmark: a seeded stratified sample (docs/EVALUATION.md, Limits)",
    )
    parser.add_argument(
        "--limit-seed",
        type=int,
        help=f"seed of the limit's sample (same seed: same items; default {DEFAULT_LIMIT_SEED}; eval score: the run's)",
    )
    parser.add_argument(
        "--limit-mode",
        choices=LIMIT_MODES,
        help=f"stratified (the seeded sample) or first (the first N questions); default: {DEFAULT_LIMIT_MODE}",
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="score the answered items when predictions or images are missing, labelled partial",
    )


def _add_allow_unresolved(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-unresolved",
        action="store_true",
        help=f"score even when over {UNRESOLVED_LIMIT:g}%% of the answers are unresolved, labelled mostly unresolved",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the eval commands."""
    run = subparsers.add_parser("run", help=command_help("eval", "run"))
    run.add_argument("--model", required=True, help="checkpoint directory or hub id")
    run.add_argument(
        "--out", type=Path, required=True, help="results go to OUT/<benchmark>/{predictions.jsonl,metrics.json}"
    )
    _add_data_arguments(run)
    run.add_argument(
        "--force", action="store_true", help="start over predictions in OUT made by another model, data or settings"
    )
    _add_allow_unresolved(run)
    run.add_argument(
        "--blind",
        action="store_true",
        help="blind control: each image replaced by a blank of one colour (--blind-fill): the words alone score",
    )
    run.add_argument(
        "--blind-fill",
        metavar="R,G,B",
        help=f"colour of --blind's blank images, three whole numbers 0-255 (with --blind, default: "
        f"{','.join(map(str, BLIND_FILL))})",
    )
    run.add_argument(
        "--report-to",
        choices=["none", "wandb"],
        default="none",
        help="wandb: log metrics and sample tables to W&B (the training run's, for one of its checkpoints)",
    )
    run.set_defaults(handler=_run)

    watcher = subparsers.add_parser("watch", help=command_help("eval", "watch"))
    watcher.add_argument("run_dir", type=Path, help="the training run's output_dir (holds checkpoint-N folders)")
    _add_data_arguments(watcher)
    watcher.add_argument("--interval", type=float, default=60.0, help="seconds between looks for new checkpoints")
    watcher.add_argument("--timeout", type=float, help="stop when no new checkpoint has appeared for this many seconds")
    watcher.add_argument("--once", action="store_true", help="evaluate the checkpoints there now, then exit")
    watcher.add_argument(
        "--wait", type=float, help="seconds to wait for RUN_DIR to appear (default: until training makes it)"
    )
    watcher.set_defaults(handler=_watch)

    score = subparsers.add_parser("score", help=command_help("eval", "score"))
    _add_location_arguments(score)
    score.add_argument(
        "--predictions",
        type=Path,
        required=True,
        help="a JSONL of {id, prediction}, or an `eval run --out` directory",
    )
    score.add_argument(
        "--out",
        type=Path,
        help="metrics go to OUT/<benchmark>/metrics.json (default: beside each predictions file)",
    )
    score.add_argument("--strict-official", action="store_true", help=STRICT_HELP)
    _add_allow_unresolved(score)
    _add_judge_arguments(score)
    score.set_defaults(handler=_score)


def _prepare(plan: EvalPlan) -> list[PreparedBenchmark]:
    """The benchmarks of ``eval run`` / ``eval watch``, loaded as the plan says (``NAME:N`` or ``--limit``: the
    limit's sample), their images checked (:func:`check_images`): every wrong path or missing image is refused
    before a model loads. The plan's ``allow_unresolved``: a mostly unresolved result is scored and labelled,
    not refused."""
    prepared = [plan.prepare(name, plan.limit_of(name)) for name in plan.benchmarks]
    check_images(prepared)
    return prepared


def _run(args: argparse.Namespace) -> int:
    from core.wandb_login import require_wandb_login
    from eval_hooks.runner import blind_label, get_backend, process_state

    # before anything loads, as training checks it: else every benchmark runs and wandb.init then refuses
    require_wandb_login(args.report_to, "--report-to wandb", "drop --report-to wandb")
    blind_fill = blind_fill_of(args)
    plan = EvalPlan.from_cli(args)
    prepared = _prepare(plan)  # before the model loads: fails fast
    judge = _judge(args)
    from eval_hooks.evaluate import require_judges

    require_judges([entry.name for entry in prepared], judge)  # judged suites: refused before the model loads
    _check_judge(judge)
    results_path = Path(args.out) / RESULTS_FILE  # other benchmarks' results in it are kept, else refused now
    kept_results(read_results_file(results_path), plan.benchmarks, run_settings(args, judge, plan), results_path)
    if process_state().is_main_process:  # before the model loads: a second `eval run` into OUT is refused
        hold_output_lock(args.out)
    require_model(str(args.model), "--model")  # a typo or a run still training: said here, not by the Hub
    backend = get_backend(plan.backend, args.model, plan.dtype, blind_fill=blind_fill)
    refused: dict[str, str] = {}  # refused for their unresolved answers or a failed judge: the others still run
    results = evaluate(
        backend, prepared, args.out, batch_size=plan.batch_size, judge=judge, force=args.force, refused=refused
    )
    state = process_state()
    if state.is_main_process:
        if blind_fill is not None:
            print(blind_label(blind_fill))
        results_path = write_results_file(args, results, judge, refused, plan)
        if results:
            print(summary_table(results))
            print(f"per benchmark: {', '.join(str(Path(args.out) / name / METRICS_FILE) for name in results)}")
        print(f"results: {results_path}")
        if args.report_to == "wandb" and results:
            log_eval_to_wandb(Path(args.model), results, args.out, blind_fill=blind_fill)
    if state.num_processes > 1:
        # Under `accelerate launch`, no process leaves while the main one still writes: a worker exiting with
        # the gloo process group alive was aborted ("terminate called without an active exception").
        state.wait_for_everyone()
        state.destroy_process_group()
    if refused:  # after the others are written; the refused ones' answers stay in OUT/<benchmark>/predictions.jsonl
        kept = [f"{message} (answers kept in {Path(args.out) / name})" for name, message in refused.items()]
        raise UserError(" | ".join(kept))
    return 0


def write_results_file(
    args: argparse.Namespace,
    results: dict[str, dict[str, Any]],
    judge: Any,
    refused: dict[str, str] | None = None,
    plan: EvalPlan | None = None,
) -> Path:
    """``OUT/results.json`` of an ``eval run`` (:func:`eval_hooks.results.results_record`), written atomically;
    the entries of other benchmarks an earlier run wrote there are kept (:func:`eval_hooks.results.kept_results`)."""
    plan = plan or EvalPlan.from_cli(args)
    settings = run_settings(args, judge, plan)
    path = Path(args.out) / RESULTS_FILE
    kept = kept_results(read_results_file(path), plan.benchmarks, settings, path)
    return atomic_write_json(path, results_record(results, settings, refused, kept))


def run_settings(args: argparse.Namespace, judge: Any, plan: EvalPlan) -> dict[str, Any]:
    """The settings of an ``eval run`` recorded as ``config`` in its ``results.json``."""
    return {
        "model": str(args.model),
        "benchmarks": args.benchmarks,
        "backend": plan.backend,
        "dtype": plan.dtype,
        "batch_size": plan.batch_size,
        "max_new_tokens": plan.max_new_tokens,
        "limit": plan.limit,
        "limit_seed": plan.limit_seed,
        "limit_mode": plan.limit_mode,
        "strict_official": plan.strict_official,
        "allow_partial": plan.allow_partial,
        "allow_unresolved": plan.allow_unresolved,
        "judge": {"model": judge.model, "base_url": judge.client.endpoint} if judge is not None else None,
        "blind": {"fill": list(blind_fill_of(args))} if args.blind else None,
        "data_root": str(plan.data_root) if plan.data_root else None,
    }


def log_eval_to_wandb(
    model: Path, results: dict[str, dict[str, Any]], out: Path, *, blind_fill: tuple[int, int, int] | None = None
) -> str:
    """Log ``eval run`` results to W&B: into the training run when ``model`` is a run directory or one of its
    ``checkpoint-N`` folders (its ``wandb_run.json``), at that step; else into a new run whose files go
    under ``out``. A blind control (``blind_fill``) logs under ``eval/<benchmark>_blind/``, beside the real
    images' metrics and never over them. Returns the run id."""
    import wandb

    from core.quiet import quiet_wandb
    from core.run_layout import WANDB_RUN_FILE, checkpoint_step
    from eval_hooks.callback import wandb_payload
    from eval_hooks.watch import open_wandb_run

    quiet_wandb()
    step = checkpoint_step(model)
    run_dir = model.parent if step is not None else model
    run = open_wandb_run(run_dir) if (run_dir / WANDB_RUN_FILE).is_file() else None
    if run is None:
        out.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "veritune",
            job_type="eval",
            name=f"eval-{model.name}" + ("-blind" if blind_fill is not None else ""),
            config={"model": str(model), "blind_fill": list(blind_fill) if blind_fill is not None else None},
            dir=str(out),
        )
        run.define_metric("train/global_step")
        run.define_metric("eval/*", step_metric="train/global_step")
    if step is None and (run_dir / "trainer_state.json").is_file():  # the final model of a run: its last step
        step = json.loads((run_dir / "trainer_state.json").read_text(encoding="utf-8")).get("global_step")
    if blind_fill is not None:
        results = {f"{name}_blind": result for name, result in results.items()}
    run.log(wandb_payload(results, step or 0, wandb))
    run_id = run.id
    run.finish()
    print(f"W&B: logged to run {run_id}")
    return run_id


def _watch(args: argparse.Namespace) -> int:
    from eval_hooks.watch import wait_for_run_dir, watch

    if args.once and not args.run_dir.is_dir():
        raise UserError(f"run directory not found: {args.run_dir} (--once evaluates the checkpoints there now)")
    if args.wait is not None and args.wait < 0:
        raise UserError(f"--wait: must be at least 0 seconds, got {args.wait:g}")
    from eval_hooks.evaluate import require_judges

    # a checkpoint's mostly unresolved answers are a point of the curve (a format not learned yet): labelled
    plan = EvalPlan.from_cli(args, allow_unresolved=True)
    prepared, judge = _prepare(plan), _judge(args)
    require_judges([entry.name for entry in prepared], judge)
    _check_judge(judge)
    wait_for_run_dir(args.run_dir, interval=args.interval, wait=args.wait)  # a watcher queued before training
    from core.run_layout import EVAL_DIR
    from eval_hooks.runner import process_state

    if process_state().is_main_process:  # one watcher per run: it locks RUN_DIR/eval, not the folder training holds
        hold_lock(args.run_dir / EVAL_DIR, f"eval watch {args.run_dir}", "wait for that watcher to finish")
    steps = watch(
        args.run_dir,
        prepared,
        batch_size=plan.batch_size,
        interval=args.interval,
        once=args.once,
        idle_timeout=args.timeout,
        backend=plan.backend,
        dtype=plan.dtype,
        judge=judge,
    )
    print(f"evaluated checkpoints: {', '.join(map(str, steps)) or 'none new'}")
    return 0


def _score(args: argparse.Namespace) -> int:
    from eval_hooks.paths import resolve_paths
    from eval_hooks.runner import PREDICTIONS_FILE, blind_label

    plan = EvalPlan.from_cli(args)
    names = plan.benchmarks
    if args.predictions.is_file() and len(names) > 1:
        raise UserError(
            f"--predictions {args.predictions}: one file holds one benchmark's predictions; "
            f"for {len(names)} benchmarks "
            "give the `eval run --out` directory (OUT/<benchmark>/predictions.jsonl)"
        )
    judge = _judge(args)
    if judge is not None:
        from eval_hooks.evaluate import refuse_unused_judge

        refuse_unused_judge(names, judge)
    results = {}
    for name in names:
        predictions = args.predictions if not args.predictions.is_dir() else args.predictions / name / PREDICTIONS_FILE
        data_path, image_root = resolve_paths(name, plan.data_root, plan.data, plan.image_roots)
        result = rescore(
            name,
            data_path,
            predictions,
            image_root,
            plan.limit_of(name),
            judge=judge,
            strict_official=args.strict_official,
            allow_partial=args.allow_partial,
            limit_seed=args.limit_seed,
            limit_mode=args.limit_mode,
            allow_unresolved=args.allow_unresolved,
        )
        selection = result.get("selection") or {}
        if result.get("selection_source") and selection.get("mode") != "all":
            print(
                f"{name}: the run's selection, read from {result['selection_source']}: {selection.get('units')} "
                f"{selection.get('unit')}s ({selection.get('mode')}, limit {selection.get('limit')}"
                + (f", seed {selection.get('seed')})" if selection.get("seed") is not None else ")"),
                file=sys.stderr,
            )
        # Beside the predictions by default, never over `eval run`'s own metrics.json (it records the generation).
        metrics_path = (
            args.out / name / "metrics.json" if args.out else predictions.with_name(f"{predictions.stem}.metrics.json")
        )
        atomic_write_json(metrics_path, result)
        results[name] = result | {"metrics_path": str(metrics_path)}
    for blind in dict.fromkeys(
        tuple(result["generation"]["blind"].get("fill", [])) for result in results.values() if "generation" in result
    ):
        print(blind_label(blind) + " (from the predictions' header)")
    print(summary_table(results))
    for name, result in results.items():
        print(f"{name}: {result['metrics_path']}")
    return 0
