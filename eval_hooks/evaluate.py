"""Evaluate a model on prepared benchmarks (:mod:`eval_hooks.prepare`) and score the predictions:
``OUT/<benchmark>/{predictions.jsonl,metrics.json}``.

Shared by ``veritune eval run``, ``veritune eval watch`` and the training eval hook; ``eval score`` rescores
here too (:func:`rescore`). Coverage and its refusals live in :mod:`eval_hooks.coverage`, the result files in
:mod:`eval_hooks.results`, paths and the location syntaxes in :mod:`eval_hooks.paths`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.coverage import (
    ALLOW_PARTIAL,
    ALLOW_UNRESOLVED,
    UnresolvedAnswers,
    answered_items,
    check_unresolved,
    unresolved_of,
)
from eval_hooks.judge import AnswerJudge, rule_answer
from eval_hooks.prepare import PreparedBenchmark, load_items
from eval_hooks.registry import BENCHMARKS, get_benchmark
from eval_hooks.results import METRICS_FILE, recorded_selection, rescore_limit
from eval_hooks.runner import (
    PREDICTIONS_FILE,
    Backend,
    predictions_provenance,
    process_state,
    read_predictions_file,
    run_items,
)
from eval_hooks.selection import select_items

logger = logging.getLogger("veritune.eval")
SAMPLE_PREDICTIONS = 20  # rows of the sample-predictions table kept in metrics.json and logged to W&B


class JudgeFailed(UserError):
    """A benchmark not scored because its LLM judge failed (down, refusing, answering no chat completion)."""


def rule_resolution(benchmark: Benchmark, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
    """Without a judge: the shares of the answers the rule-based grader resolves and leaves unresolved."""
    answered = [item for item in items if item.id in predictions and not item.missing_images]
    rules = sum(rule_answer(benchmark, item, predictions[item.id]) is not None for item in answered)
    total = len(answered)
    return {
        "model": None,
        "mode": "rules_only",
        "answers": total,
        "rules": rules,
        "judge": 0,
        "unresolved": total - rules,
        "rules_share": 100 * rules / total if total else 0.0,
        "judge_share": 0.0,
        "unresolved_share": 100 * (total - rules) / total if total else 0.0,
    }


def require_judges(names: list[str], judge: AnswerJudge | None) -> None:
    """Benchmarks that only an LLM judge can score (``requires_judge``: MMHal-Bench, HaloQuest) need one."""
    if judge is None:
        needing = [name for name in names if name in BENCHMARKS and getattr(BENCHMARKS[name], "requires_judge", False)]
        if needing:
            raise UserError(f"{', '.join(needing)}: scored by an LLM judge: give --llm-base-url and --llm-model")
    else:
        refuse_unused_judge(names, judge)


def refuse_unused_judge(names: list[str], judge: AnswerJudge) -> None:
    """A judge that no benchmark of ``names`` uses is refused (the --llm-* options would be silently
    ignored); the benchmarks among others that do not use it are named on stderr."""
    unused = [name for name in names if name in BENCHMARKS and not judge.applies_to(BENCHMARKS[name])]
    if not unused:
        return
    if len(unused) == len(names):
        raise UserError(
            f"--llm-base-url/--llm-model: no LLM judge is used by {', '.join(unused)} (each is scored by its own "
            "rules alone); drop the --llm-* options"
        )
    print(f"note: the LLM judge is not used by {', '.join(unused)} (scored by their own rules)", file=sys.stderr)


def score_benchmark(
    name: str,
    items: list[EvalItem],
    predictions: dict[str, str],
    judge: AnswerJudge | None = None,
    strict_official: bool = False,
    *,
    allow_partial: bool = False,
    opt_in: str = ALLOW_PARTIAL,
    allow_unresolved: bool = False,
    unresolved_opt_in: str = ALLOW_UNRESOLVED,
) -> dict[str, Any]:
    """Score ``predictions`` against ``items``, checking that the ids belong to the benchmark; with a
    ``judge``, answers the rules cannot resolve are resolved by it first (recorded in ``answer_resolution``).

    Predictions must answer every item (:func:`eval_hooks.coverage.answered_items`); ``allow_partial``
    (``opt_in``) scores the answered ones only. The result's ``coverage`` (:func:`eval_hooks.coverage.coverage_of`,
    with the unresolved share) and ``partial`` say which. More unresolved answers than
    :data:`eval_hooks.coverage.UNRESOLVED_LIMIT` are refused (:func:`eval_hooks.coverage.check_unresolved`);
    ``allow_unresolved`` (``unresolved_opt_in``) labels the result instead.

    ``strict_official``: the raw responses go to the official rule with no veritune step before it (AMBER
    discriminative then counts only the exact responses ``Yes`` and ``No``, as its ``inference.py``); a
    judge is refused then, being such a step. Recorded as ``strict_official`` in the result."""
    known = {item.id for item in items}
    stray = [key for key in predictions if key not in known]
    if stray:
        raise UserError(
            f"{name}: {len(stray)} prediction id(s) are not in the benchmark, first: {', '.join(stray[:5])} "
            "(were they made on another file or subset?)"
        )
    if strict_official and judge is not None:
        raise UserError(
            "--strict-official: scores the raw responses as the official script does; drop the --judge-* options"
        )
    benchmark = get_benchmark(name)
    if judge is None and getattr(benchmark, "requires_judge", False):
        raise UserError(f"{name}: scored by an LLM judge: give --llm-base-url and --llm-model")
    items, coverage = answered_items(
        name, items, predictions, allow_partial=allow_partial, opt_in=opt_in, benchmark=benchmark
    )
    resolution = None
    if judge is not None:
        try:
            predictions, resolution = judge.resolve(benchmark, items, predictions)
        except UserError as err:
            raise JudgeFailed(str(err)) from None
    elif benchmark.answer_format and not strict_official:
        resolution = rule_resolution(benchmark, items, predictions)
    result = benchmark.score(items, predictions, strict_official=strict_official)
    result["strict_official"] = strict_official
    result["counts"]["predicted"] = sum(item.id in predictions for item in items)
    result["partial"] = coverage["partial"]
    result["coverage"] = coverage
    if resolution is not None:
        result["answer_resolution"] = resolution
        for step in (
            "rules",
            "judge",
            "unresolved",
        ):  # logged with the metrics: a rising unresolved share is a format problem
            if f"{step}_share" in resolution:  # absent when the judge does not apply to the benchmark
                result["metrics"][f"answers/{step}_share"] = resolution[f"{step}_share"]
    coverage["unresolved"], coverage["unresolved_share"] = unresolved_of(result, coverage["answered"])
    result["mostly_unresolved"] = False
    check_unresolved(benchmark, items, result, allow=allow_unresolved, opt_in=unresolved_opt_in)
    return result


def sample_rows(
    items: list[EvalItem],
    predictions: dict[str, str],
    count: int = SAMPLE_PREDICTIONS,
    benchmark: Benchmark | None = None,
) -> list[dict[str, Any]]:
    """The first ``count`` answered items as table rows: id, the first image's path, prompt, reference
    answer, prediction, and ``correct``: the benchmark's own per-item verdict
    (:meth:`~eval_hooks.base.Benchmark.item_correct`), else the rule-based grader's reading of the prediction
    equals the reference's; None where neither applies."""
    rows = []
    for item in items:
        if item.id in predictions:
            reference = next((item.meta[k] for k in ("label", "answer", "gt_answer") if k in item.meta), None)
            correct = None if benchmark is None else benchmark.item_correct(item, predictions[item.id])
            if correct is None and benchmark is not None and reference is not None:
                truth = rule_answer(benchmark, item, str(reference))
                if truth is not None:
                    correct = rule_answer(benchmark, item, predictions[item.id]) == truth
            rows.append(
                {
                    "id": item.id,
                    "image": str(item.images[0]) if item.images else None,
                    "prompt": item.prompt,
                    "reference": reference,
                    "prediction": predictions[item.id],
                    "correct": correct,
                }
            )
            if len(rows) == count:
                break
    return rows


def evaluate_prepared(
    backend: Backend,
    prepared: PreparedBenchmark,
    out_dir: Path,
    *,
    batch_size: int = 8,
    judge: AnswerJudge | None = None,
    force: bool = False,
    opt_in: str = ALLOW_PARTIAL,
    unresolved_opt_in: str = ALLOW_UNRESOLVED,
) -> dict[str, Any]:
    """Run one prepared benchmark (resuming from ``OUT/<benchmark>/predictions.jsonl`` when it was made by
    the same model on the same items with the same settings; ``force`` starts a different one over) and
    score it. ``generation.blind`` in the result is ``{"fill": [R, G, B]}`` when the backend is a blind
    control (every image a blank of its size), else None.

    Every process of a distributed run calls this; the main process scores, writes ``metrics.json`` and
    returns the result, the others return ``{}``.
    """
    bench_dir = Path(out_dir) / prepared.name
    blind_fill = getattr(backend, "blind_fill", None)
    desc = f"{prepared.name} (blind)" if blind_fill is not None else prepared.name
    predictions = run_items(
        backend, prepared.items, bench_dir / PREDICTIONS_FILE, batch_size=batch_size, desc=desc, force=force
    )
    if not process_state().is_main_process:
        return {}
    missing = sorted({str(path) for item in prepared.items for path in item.missing_images})
    if missing:
        skipped = sum(bool(item.missing_images) for item in prepared.items)
        logger.warning(
            "%s: %d item(s) skipped, %d image(s) missing or unreadable, first: %s",
            prepared.name,
            skipped,
            len(missing),
            ", ".join(missing[:3]),
        )
    result = score_benchmark(
        prepared.name,
        prepared.items,
        predictions,
        judge,
        prepared.strict_official,
        allow_partial=prepared.allow_partial,
        opt_in=opt_in,
        allow_unresolved=prepared.allow_unresolved,
        unresolved_opt_in=unresolved_opt_in,
    )
    result["data"] = {
        "path": str(prepared.data_path),
        "image_root": str(prepared.image_root) if prepared.image_root else None,
        "limit": prepared.limit,
        "written_in": str(Path(bench_dir).resolve()),  # where a moved run finds its data again (results.relocated)
    }
    result["selection"] = prepared.selection
    result["generation"] = {
        "backend": backend.name,
        "model": backend.model_name,
        "greedy": True,
        "batch_size": batch_size,
        "max_new_tokens": prepared.max_new_tokens or sorted({item.max_new_tokens for item in prepared.items}),
        "blind": {"fill": list(blind_fill)} if blind_fill is not None else None,
    }
    result["provenance"] = predictions_provenance(backend, prepared.items)
    result["missing_images"] = missing[:100]
    result["samples"] = sample_rows(prepared.items, predictions, benchmark=prepared.benchmark)
    atomic_write_json(bench_dir / METRICS_FILE, result)
    return result


def evaluate(
    backend: Backend,
    prepared: list[PreparedBenchmark],
    out_dir: Path,
    *,
    batch_size: int = 8,
    judge: AnswerJudge | None = None,
    force: bool = False,
    refused: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run and score each prepared benchmark into ``out_dir/<benchmark>/``; ``{name: result}`` on the
    main process. With ``refused`` given, a benchmark refused for its unresolved answers
    (:class:`eval_hooks.coverage.UnresolvedAnswers`) or not scored because its judge failed
    (:class:`JudgeFailed`) is put there, ``{name: the refusal}`` (no metrics.json; its predictions stay), and
    the others still run; without it, the refusal is raised."""
    results = {}
    for entry in prepared:
        try:
            result = evaluate_prepared(backend, entry, out_dir, batch_size=batch_size, judge=judge, force=force)
        except (UnresolvedAnswers, JudgeFailed) as err:
            if refused is None:
                raise
            judged = isinstance(err, JudgeFailed)
            refused[entry.name] = f"{entry.name}: not scored, the LLM judge failed: {err}" if judged else str(err)
            continue
        if result:
            results[entry.name] = result
    return results


def rescore(
    name: str,
    data_path: Path,
    predictions_path: Path,
    image_root: Path | None = None,
    limit: int | None = None,
    judge: AnswerJudge | None = None,
    strict_official: bool = False,
    allow_partial: bool = False,
    *,
    limit_seed: int | None = None,
    limit_mode: str | None = None,
    allow_unresolved: bool = False,
) -> dict[str, Any]:
    """Score an existing predictions file without loading any model (``veritune eval score``), on the items
    the run answered: the selection recorded with the predictions (:func:`eval_hooks.results.recorded_selection`:
    the limit, seed and mode of ``eval run``, ``eval watch`` or the hook; a given ``limit``, ``limit_seed`` or
    ``limit_mode`` that contradicts it is refused), else the items ``limit`` keeps (drawn as ``eval run`` draws
    them). The items must all be answered (``allow_partial``: the answered ones are scored, labelled partial); no image
    is read, so the numbers never depend on the images being on disk. When the file's header says a blind
    control made it, the result keeps that mark as ``generation.blind``; ``selection_source`` is the file
    the selection was read from (None: none was recorded)."""
    benchmark = get_benchmark(name)
    everything = load_items(name, benchmark, data_path, image_root)
    if not predictions_path.is_file():
        raise UserError(f"predictions file not found: {predictions_path}")
    recorded = recorded_selection(predictions_path, name)
    limit, limit_seed, limit_mode = rescore_limit(name, recorded, limit, limit_seed, limit_mode)
    items, selection = select_items(benchmark, everything, limit, seed=limit_seed, mode=limit_mode)
    header, predictions = read_predictions_file(predictions_path)
    budget = ((recorded[0].get("generation") or {}) if recorded else {}).get("max_new_tokens")
    for item in items:  # scoring reads no image: an item is answered or not, whatever is on disk now
        item.missing_images = []
        if isinstance(budget, int):  # the run's budget, which a refusal for unresolved answers names
            item.max_new_tokens = budget
    result = score_benchmark(
        name,
        items,
        predictions,
        judge,
        strict_official,
        allow_partial=allow_partial,
        allow_unresolved=allow_unresolved,
    )
    result["selection"] = selection
    result["selection_source"] = str(recorded[1]) if recorded else None
    blind = ((header or {}).get("generation") or {}).get("blind")
    if isinstance(blind, dict):
        result["generation"] = {"blind": blind}
    return result
