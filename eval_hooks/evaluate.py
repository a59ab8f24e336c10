"""Evaluate a model on benchmarks: ``OUT/<benchmark>/{predictions.jsonl,metrics.json}``.

Shared by ``veritune eval run``, ``veritune eval watch`` and the training eval hook. Benchmarks are
prepared (located, loaded, limited) before any model is loaded, so a wrong path fails in a second.
"""

from __future__ import annotations

import difflib
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.judge import AnswerJudge, rule_answer
from eval_hooks.registry import BENCHMARKS, PRESETS, get_benchmark
from eval_hooks.runner import (
    PREDICTIONS_FILE,
    Backend,
    predictions_provenance,
    process_state,
    read_predictions_file,
    run_items,
)
from veritune.core.errors import UserError
from veritune.core.io import atomic_write_json

logger = logging.getLogger("veritune.eval")

METRICS_FILE = "metrics.json"
SAMPLE_PREDICTIONS = 20  # rows of the sample-predictions table kept in metrics.json and logged to W&B
_PARAPHRASE_ID = re.compile(r"^(.*)/p\d+$")  # "17/p2": question 17 asked with its third paraphrase


@dataclass
class PreparedBenchmark:
    """A benchmark's items, ready to run: where they came from and how many were kept."""

    name: str
    benchmark: Benchmark
    items: list[EvalItem]
    data_path: Path
    image_root: Path | None
    limit: int | None = None
    max_new_tokens: int | None = None
    strict_official: bool = False


def check_benchmark_name(name: str, source: str) -> None:
    """Refuse a name that is neither in the registry nor a dotted path, naming the closest registered one."""
    if name in BENCHMARKS or "." in name:
        return
    close = difflib.get_close_matches(name, list(BENCHMARKS), n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise UserError(
        f"{source}: unknown benchmark {name!r} ({hint}known: {', '.join(BENCHMARKS)}, or a dotted path to a Benchmark)"
    )


def parse_benchmark_names(
    text: str | list[str], source: str = "--benchmarks", *, allow_limits: bool = False
) -> list[str]:
    """Benchmark names from ``"a,b"`` or a list of such strings (the recipe's ``eval_benchmarks``), in order,
    without repeats. The one parser of benchmark lists, for the CLI and the recipes alike: an empty entry
    (``a,,b``), an unknown name or an empty list is a one-line error, never silently dropped. With
    ``allow_limits``, an entry may be ``NAME:N`` (the eval hooks' per-benchmark limit)."""
    entries = [text] if isinstance(text, str) else [str(entry) for entry in text]
    names = []
    for entry in entries:
        for part in entry.split(","):
            name = part.strip()
            if not name:
                raise UserError(
                    f"{source}: empty entry in {entry!r} (give comma-separated names, e.g. pope,oric_bench_r1)"
                )
            base, sep, limit = name.rpartition(":")
            base = base.strip() if allow_limits and sep else name
            if base in PRESETS:  # a preset ("general") stands for its benchmarks, each with the same limit
                names.extend(f"{member}:{limit}" if allow_limits and sep else member for member in PRESETS[base])
                continue
            check_benchmark_name(base, source)
            names.append(name)
    if not names:
        raise UserError(f"{source}: give at least one benchmark name")
    return list(dict.fromkeys(names))


def parse_data_overrides(
    values: list[str], source: str = "--data", benchmarks: list[str] | None = None
) -> dict[str, Path]:
    """``["pope=data/pope", ...]`` -> ``{"pope": Path("data/pope")}``: the one ``BENCHMARK=PATH`` syntax of
    ``eval run``, ``eval score``, ``eval watch`` and the recipes' ``eval_data``. A malformed entry, or one
    naming a benchmark that is not being evaluated, is an error (it would otherwise be silently unused)."""
    overrides: dict[str, Path] = {}
    for value in values:
        name, sep, path = str(value).partition("=")
        name = name.strip()
        if not sep or not name or not path.strip():
            raise UserError(f"{source} {value!r}: expected BENCHMARK=PATH, e.g. pope=data/benchmarks/pope")
        if benchmarks is not None and name not in {b.rpartition(":")[0] or b for b in benchmarks}:
            raise UserError(
                f"{source} {value!r}: {name!r} is not among the benchmarks being evaluated ({', '.join(benchmarks)})"
            )
        overrides[name] = Path(path.strip())
    return overrides


def resolve_paths(
    name: str, data_root: Path | None, data: dict[str, Path], image_root: Path | None
) -> tuple[Path, Path | None]:
    """Where a benchmark's files are: an explicit ``--data name=PATH`` or its layout under ``--data-root``."""
    benchmark = get_benchmark(name)
    if name in data:
        return Path(data[name]), image_root
    if data_root is None:
        raise UserError(f"{name}: give --data-root DIR (expects {benchmark.data_layout}) or --data {name}=PATH")
    data_path, default_images = benchmark.default_paths(Path(data_root))
    return data_path, image_root or default_images


def load_items(name: str, benchmark: Benchmark, data_path: Path, image_root: Path | None) -> list[EvalItem]:
    """The benchmark's items from its files, refused when two share an id (predictions are keyed by id, so
    a repeated id would let one answer overwrite another). Every run, watch, hook and rescore loads here."""
    items = benchmark.load(data_path, image_root)
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise UserError(
                f"{name}: {data_path}: item id {item.id!r} occurs more than once; "
                "ids must be unique (predictions are keyed by them)"
            )
        seen.add(item.id)
    return items


def limit_items(items: list[EvalItem], limit: int | None, *, by_pair: bool = False) -> list[EvalItem]:
    """The items of the first ``limit`` questions; the paraphrases of a question (ids ``Q/p0``, ``Q/p1``,
    ...) count as one question and stay together, and so do the items of one ``meta["pair"]`` with
    ``by_pair`` (a benchmark's ``limit_by_pair``: FINER's yes/no twins)."""
    if limit is None:
        return items
    if limit < 1:
        raise UserError(f"--limit: must be at least 1, got {limit}")
    keep, questions = [], set()
    for item in items:
        match = _PARAPHRASE_ID.match(item.id)
        question = match.group(1) if match else item.id
        if by_pair and "pair" in item.meta:
            question = f"pair:{item.meta['pair']}"
        if question not in questions:
            if len(questions) == limit:
                continue
            questions.add(question)
        keep.append(item)
    return keep


def prepare_benchmark(
    name: str,
    *,
    data_root: Path | None = None,
    data: dict[str, Path] | None = None,
    image_root: Path | None = None,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    strict_official: bool = False,
) -> PreparedBenchmark:
    """Locate and load one benchmark, keep its first ``limit`` questions, set the generation budget;
    ``strict_official``: score exactly as the official script (see :func:`score_benchmark`)."""
    benchmark = get_benchmark(name)
    data_path, images = resolve_paths(name, data_root, data or {}, image_root)
    if not data_path.exists():
        raise UserError(f"{name}: {data_path} not found (expected {benchmark.data_layout or 'the benchmark file'})")
    items = limit_items(load_items(name, benchmark, data_path, images), limit, by_pair=benchmark.limit_by_pair)
    if max_new_tokens is not None:
        if max_new_tokens < 1:
            raise UserError(f"--max-new-tokens: must be at least 1, got {max_new_tokens}")
        for item in items:
            item.max_new_tokens = max_new_tokens
    return PreparedBenchmark(name, benchmark, items, data_path, images, limit, max_new_tokens, strict_official)


def prepare_benchmarks(names: list[str], **kwargs: Any) -> list[PreparedBenchmark]:
    """:func:`prepare_benchmark` for each name (every bad name or path is reported before a model loads)."""
    return [prepare_benchmark(name, **kwargs) for name in names]


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
) -> dict[str, Any]:
    """Score ``predictions`` against ``items``, checking that the ids belong to the benchmark; with a
    ``judge``, answers the rules cannot resolve are resolved by it first (recorded in ``answer_resolution``).

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
    resolution = None
    if judge is not None:
        predictions, resolution = judge.resolve(benchmark, items, predictions)
    elif benchmark.answer_format and not strict_official:
        resolution = rule_resolution(benchmark, items, predictions)
    result = benchmark.score(items, predictions, strict_official=strict_official)
    result["strict_official"] = strict_official
    result["counts"]["predicted"] = sum(item.id in predictions for item in items)
    if resolution is not None:
        result["answer_resolution"] = resolution
        for step in (
            "rules",
            "judge",
            "unresolved",
        ):  # logged with the metrics: a rising unresolved share is a format problem
            if f"{step}_share" in resolution:  # absent when the judge does not apply to the benchmark
                result["metrics"][f"answers/{step}_share"] = resolution[f"{step}_share"]
    return result


def sample_rows(
    items: list[EvalItem],
    predictions: dict[str, str],
    count: int = SAMPLE_PREDICTIONS,
    benchmark: Benchmark | None = None,
) -> list[dict[str, Any]]:
    """The first ``count`` answered items as table rows: id, the first image's path, prompt, reference
    answer, prediction, and ``correct`` (the grader's reading of the prediction equals the reference's;
    None where the benchmark has no rule-graded answer format)."""
    rows = []
    for item in items:
        if item.id in predictions:
            reference = next((item.meta[k] for k in ("label", "answer", "gt_answer") if k in item.meta), None)
            correct = None
            if benchmark is not None and reference is not None:
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
    result = score_benchmark(prepared.name, prepared.items, predictions, judge, prepared.strict_official)
    result["data"] = {
        "path": str(prepared.data_path),
        "image_root": str(prepared.image_root) if prepared.image_root else None,
        "limit": prepared.limit,
    }
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
) -> dict[str, dict[str, Any]]:
    """Run and score each prepared benchmark into ``out_dir/<benchmark>/``; ``{name: result}`` on the
    main process."""
    results = {}
    for entry in prepared:
        result = evaluate_prepared(backend, entry, out_dir, batch_size=batch_size, judge=judge, force=force)
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
) -> dict[str, Any]:
    """Score an existing predictions file without loading any model (``veritune eval score``). When the
    file's header says a blind control made it, the result keeps that mark as ``generation.blind``."""
    benchmark = get_benchmark(name)
    items = limit_items(load_items(name, benchmark, data_path, image_root), limit, by_pair=benchmark.limit_by_pair)
    if not predictions_path.is_file():
        raise UserError(f"predictions file not found: {predictions_path}")
    header, predictions = read_predictions_file(predictions_path)
    for item in items:  # answered, so its images were there when it was generated: scoring needs no image
        if item.id in predictions:
            item.missing_images = []
    result = score_benchmark(name, items, predictions, judge, strict_official)
    blind = ((header or {}).get("generation") or {}).get("blind")
    if isinstance(blind, dict):
        result["generation"] = {"blind": blind}
    return result


def headline_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The metrics worth a summary line: top-level ones and macro averages (not per class or subset)."""
    return {key: value for key, value in result["metrics"].items() if "/" not in key or key.startswith("macro/")}
