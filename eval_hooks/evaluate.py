"""Evaluate a model on benchmarks: ``OUT/<benchmark>/{predictions.jsonl,metrics.json}``.

Shared by ``veritune eval run``, ``veritune eval watch`` and the training eval hook. Benchmarks are
prepared (located, loaded, limited) before any model is loaded, so a wrong path fails in a second.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json, dataset_manifest
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
from eval_hooks.selection import DEFAULT_LIMIT_MODE, DEFAULT_LIMIT_SEED, select_items

logger = logging.getLogger("veritune.eval")

METRICS_FILE = "metrics.json"
RESULTS_FILE = "results.json"  # one per `eval run`: every benchmark's headline metrics, coverage and the settings
SAMPLE_PREDICTIONS = 20  # rows of the sample-predictions table kept in metrics.json and logged to W&B


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
    allow_partial: bool = False  # score the answered items only, labelled partial (see :func:`score_benchmark`)
    selection: dict[str, Any] = field(default_factory=dict)  # what the limit kept (eval_hooks.selection)


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
    text: str | list[str], source: str = "--benchmarks", *, allow_limits: bool = True
) -> list[str]:
    """Benchmark names from ``"a,b"`` or a list of such strings (the recipe's ``eval_benchmarks``), in order,
    without repeats. The one parser of benchmark lists, for ``eval run``, ``eval score``, ``eval watch`` and the
    recipes alike: an empty entry (``a,,b``), an unknown name, a benchmark given twice or an empty list is a
    one-line error, never silently dropped. With ``allow_limits``, an entry may be ``NAME:N`` (at most N
    questions of that benchmark, instead of ``--limit``; :func:`parse_benchmark_limits` splits them off)."""
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
            if allow_limits and sep:
                base, limit = base.strip(), limit.strip()
                if not (limit.isascii() and limit.isdigit() and int(limit) >= 1):
                    raise UserError(f"{source}: {name!r}: expected NAME or NAME:N (N a whole number, at least 1)")
                name = f"{base}:{int(limit)}"
            else:
                base = name
            if base in PRESETS:  # a preset ("general") stands for its benchmarks, each with the same limit
                names.extend(f"{member}:{limit}" if allow_limits and sep else member for member in PRESETS[base])
                continue
            check_benchmark_name(base, source)
            names.append(name)
    if not names:
        raise UserError(f"{source}: give at least one benchmark name")
    names = list(dict.fromkeys(names))
    bases = [name.rpartition(":")[0] or name for name in names]
    twice = [base for base, count in Counter(bases).items() if count > 1]
    if twice:
        given = ", ".join(name for name in names if (name.rpartition(":")[0] or name) == twice[0])
        raise UserError(f"{source}: {twice[0]} is given twice ({given}); give each benchmark once")
    return names


def parse_benchmark_limits(entries: list[str]) -> tuple[list[str], dict[str, int]]:
    """``["pope:200", "oric_bench_r1"]`` (from :func:`parse_benchmark_names`) -> the names and the per-benchmark
    limits (``NAME:N`` overrides ``--limit`` / ``eval_limit`` for that benchmark: a quick POPE sample beside
    a full ORIC-Bench, say)."""
    names, limits = [], {}
    for entry in entries:
        name, sep, count = str(entry).rpartition(":")
        if sep and name and count.strip().isdigit():
            names.append(name.strip())
            limits[name.strip()] = int(count)
        elif sep and name:
            raise UserError(f"eval_benchmarks: {entry!r}: expected NAME or NAME:N (N a whole number, at least 1)")
        else:
            names.append(str(entry).strip())
    return names, limits


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


ImageRoots = dict[str | None, Path]  # --image-root: {None: PATH for every benchmark, NAME: PATH for one}


def parse_image_roots(
    values: list[str] | str | Path | None, source: str = "--image-root", benchmarks: list[str] | None = None
) -> ImageRoots:
    """``--image-root`` values: a plain ``PATH`` (every benchmark's images, as before) and/or ``BENCHMARK=PATH``
    entries (one benchmark's; the syntax of ``--data``, :func:`parse_data_overrides`). An entry is
    ``BENCHMARK=PATH`` when the text before its first ``=`` names no folder (holds no ``/``); two plain paths
    are an error."""
    if values is None:
        return {}
    entries = [values] if isinstance(values, (str, Path)) else list(values)
    roots: ImageRoots = {}
    for value in map(str, entries):
        name, sep, _ = value.partition("=")
        if sep and name.strip() and "/" not in name and "\\" not in name:
            roots.update(parse_data_overrides([value], source, benchmarks))
            continue
        if None in roots:
            raise UserError(
                f"{source} {value!r}: a second plain path (the first: {roots[None]}); give BENCHMARK=PATH for "
                "the benchmarks whose images are elsewhere"
            )
        roots[None] = Path(value)
    return roots


def image_root_of(name: str, image_root: Path | ImageRoots | None) -> Path | None:
    """The image root of benchmark ``name`` (``name`` may carry a ``:N`` limit): its own ``NAME=PATH``, else the
    plain ``--image-root``, else None (the benchmark's own default)."""
    if not isinstance(image_root, dict):
        return Path(image_root) if image_root else None
    base = name.rpartition(":")[0] or name
    return image_root.get(name) or image_root.get(base) or image_root.get(None)


def recorded_image_root(data_path: Path) -> Path | None:
    """The image folder a veritune builder recorded for ``data_path`` (``image_root`` in the manifest beside
    the file, or beside the files of a folder: ``veritune build finer-bench`` and ``oric-bench`` write it),
    when it names one existing folder; else None. A benchmark built with ``--image-root`` is thus evaluated
    on the images it was built from, with no copy under ``--data-root``."""
    data_path = Path(data_path)
    files = sorted(p for p in data_path.iterdir() if p.is_file()) if data_path.is_dir() else [data_path]
    roots = set()
    for file in files:
        manifest = dataset_manifest(file)
        if manifest is None or file == manifest:
            continue
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get("image_root")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(recorded, str) and recorded:
            roots.add(Path(recorded))
    if len(roots) == 1 and next(iter(roots)).is_dir():
        return next(iter(roots))
    return None


def resolve_paths(
    name: str, data_root: Path | None, data: dict[str, Path], image_root: Path | ImageRoots | None
) -> tuple[Path, Path | None]:
    """Where a benchmark's files are: an explicit ``--data name=PATH`` or its layout under ``--data-root``; its
    images: its ``--image-root`` (:func:`image_root_of`), else the folder its builder recorded
    (:func:`recorded_image_root`), else the layout's (the loader's own default for ``--data``)."""
    benchmark = get_benchmark(name)
    image_root = image_root_of(name, image_root)
    if name in data:
        data_path = Path(data[name])
        return data_path, image_root or (recorded_image_root(data_path) if data_path.exists() else None)
    if data_root is None:
        raise UserError(f"{name}: give --data-root DIR (expects {benchmark.data_layout}) or --data {name}=PATH")
    data_path, default_images = benchmark.default_paths(Path(data_root))
    return data_path, image_root or (recorded_image_root(data_path) if data_path.exists() else None) or default_images


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


def prepare_benchmark(
    name: str,
    *,
    data_root: Path | None = None,
    data: dict[str, Path] | None = None,
    image_root: Path | ImageRoots | None = None,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    strict_official: bool = False,
    allow_partial: bool = False,
    limit_seed: int = DEFAULT_LIMIT_SEED,
    limit_mode: str = DEFAULT_LIMIT_MODE,
) -> PreparedBenchmark:
    """Locate and load one benchmark, keep the items of ``limit`` questions (a stratified sample drawn with
    ``limit_seed``, or with ``limit_mode="first"`` the first ones: :func:`eval_hooks.selection.select_items`),
    set the generation budget; ``strict_official``: score exactly as the official script (see
    :func:`score_benchmark`); ``allow_partial``: score the answered items only, labelled partial."""
    benchmark = get_benchmark(name)
    data_path, images = resolve_paths(name, data_root, data or {}, image_root)
    if not data_path.exists():
        raise UserError(f"{name}: {data_path} not found (expected {benchmark.data_layout or 'the benchmark file'})")
    items, selection = select_items(
        benchmark, load_items(name, benchmark, data_path, images), limit, seed=limit_seed, mode=limit_mode
    )
    if max_new_tokens is not None:
        if max_new_tokens < 1:
            raise UserError(f"--max-new-tokens: must be at least 1, got {max_new_tokens}")
        for item in items:
            item.max_new_tokens = max_new_tokens
    return PreparedBenchmark(
        name,
        benchmark,
        items,
        data_path,
        images,
        limit,
        max_new_tokens,
        strict_official,
        allow_partial=allow_partial,
        selection=selection,
    )


def prepare_as_evaluated(name: str, result: dict[str, Any]) -> PreparedBenchmark:
    """The items a ``metrics.json`` was scored on, prepared again from its ``data`` and ``selection`` (the same
    files, limit, seed and mode draw the same items): what a report or the demo's intervals resample."""
    data, selection = result.get("data") or {}, result.get("selection") or {}
    return prepare_benchmark(
        name,
        data={name: Path(data["path"])},
        image_root=Path(data["image_root"]) if data.get("image_root") else None,
        limit=data.get("limit"),
        limit_seed=selection.get("seed") if selection.get("seed") is not None else DEFAULT_LIMIT_SEED,
        # a result written before limits were sampled kept the first N
        limit_mode=selection.get("mode", "first") if selection.get("mode") != "all" else DEFAULT_LIMIT_MODE,
    )


def prepare_benchmarks(names: list[str], **kwargs: Any) -> list[PreparedBenchmark]:
    """:func:`prepare_benchmark` for each name (every bad name or path is reported before a model loads)."""
    return [prepare_benchmark(name, **kwargs) for name in names]


SHOWN = 5  # ids or paths an error message names
ALLOW_PARTIAL = "--allow-partial"  # the CLI's opt-in; the recipes' is eval_allow_partial (eval_hooks/callback.py)


def coverage_of(items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
    """How much of the benchmark ``predictions`` cover: ``expected`` (the items, after the run's limit),
    ``answered`` and ``unanswered`` (with their share in percent), ``missing_images`` (items whose images are
    missing or unreadable; they are never generated) and ``partial`` (not every item answered), with the first
    unanswered ids and missing image paths. ``unresolved_share`` is filled in by :func:`score_benchmark`."""
    unanswered = [item.id for item in items if item.id not in predictions]
    missing_paths = sorted({str(path) for item in items for path in item.missing_images})
    expected = len(items)
    answered = expected - len(unanswered)
    return {
        "expected": expected,
        "answered": answered,
        "unanswered": len(unanswered),
        "answered_share": 100 * answered / expected if expected else 0.0,
        "missing_images": sum(bool(item.missing_images) for item in items),
        "missing_image_files": len(missing_paths),
        "unresolved_share": None,
        "partial": answered < expected,
        "first_unanswered": unanswered[:SHOWN],
        "first_missing_images": missing_paths[:SHOWN],
    }


def check_images(
    prepared: list[PreparedBenchmark], *, opt_in: str = ALLOW_PARTIAL, where: str = "--image-root, --data-root, --data"
) -> None:
    """Refuse, before any model loads, a benchmark whose images are missing (a wrong image root draws all-zero
    metrics otherwise): one ``error:`` line with the counts and the first paths. With the benchmark's
    ``allow_partial`` (``opt_in``), a warning instead, unless no item has its images."""
    for entry in prepared:
        missing = [item for item in entry.items if item.missing_images]
        if not missing:
            continue
        paths = sorted({str(path) for item in missing for path in item.missing_images})
        what = (
            f"{entry.name}: {len(missing)} of {len(entry.items)} items have missing images ({len(paths)} image "
            f"file(s) not found{f' under {entry.image_root}' if entry.image_root else ''}, "
            f"first: {', '.join(paths[:SHOWN])})"
        )
        if len(missing) == len(entry.items):
            raise UserError(f"{what}; nothing can be answered: check {where}")
        if not entry.allow_partial:
            raise UserError(
                f"{what}; check {where}, or add {opt_in} to score only the items whose images are there "
                "(labelled partial)"
            )
        logger.warning("%s; scored without them (%s: labelled partial)", what, opt_in)


def _unresolved_share(result: dict[str, Any], answered: int) -> float | None:
    """The share (percent) of answers no grader could read: the answer resolution's, else the scorer's count."""
    resolution = result.get("answer_resolution") or {}
    if resolution.get("unresolved_share") is not None:
        return float(resolution["unresolved_share"])
    counts = result.get("counts", {})
    unresolved = counts.get("unresolved", counts.get("unresolved_scored_as_0"))
    if isinstance(unresolved, (int, float)) and not isinstance(unresolved, bool) and answered:
        return 100 * unresolved / answered
    return None


def answered_items(
    name: str, items: list[EvalItem], predictions: dict[str, str], *, allow_partial: bool, opt_in: str = ALLOW_PARTIAL
) -> tuple[list[EvalItem], dict[str, Any]]:
    """The items to score and the coverage (:func:`coverage_of`). Every item must be answered; with
    ``allow_partial``, only the answered ones are scored (never an unanswered item as an answer). An answered
    item is scored whether its images are on disk now or not (they were there when it was answered).

    Raises:
        UserError: nothing answered (even with ``allow_partial``), or not everything without it: counts and
            the first unanswered ids (and missing image paths).
    """
    coverage = coverage_of(items, predictions)
    if coverage["expected"] and not coverage["answered"]:
        raise UserError(
            f"{name}: none of the {coverage['expected']} items is answered by the predictions "
            f"(first expected ids: {', '.join(coverage['first_unanswered'])}); nothing to score"
        )
    if coverage["partial"] and not allow_partial:
        images = (
            f"; {coverage['missing_images']} items have missing images, first: "
            f"{', '.join(coverage['first_missing_images'])}"
            if coverage["missing_images"]
            else ""
        )
        raise UserError(
            f"{name}: the predictions answer {coverage['answered']} of {coverage['expected']} items "
            f"({coverage['unanswered']} unanswered, first: {', '.join(coverage['first_unanswered'])}{images}); "
            f"give predictions for every item (eval score: the same --limit as the run), or add {opt_in} to score the "
            "answered items only (labelled partial)"
        )
    scored = [
        dataclasses.replace(item, missing_images=[]) if item.missing_images else item
        for item in items
        if item.id in predictions
    ]
    return scored, coverage


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
) -> dict[str, Any]:
    """Score ``predictions`` against ``items``, checking that the ids belong to the benchmark; with a
    ``judge``, answers the rules cannot resolve are resolved by it first (recorded in ``answer_resolution``).

    Predictions must answer every item (:func:`answered_items`); ``allow_partial`` (``opt_in``) scores the
    answered ones only. The result's ``coverage`` (:func:`coverage_of`, with the unresolved share) and
    ``partial`` say which.

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
    items, coverage = answered_items(name, items, predictions, allow_partial=allow_partial, opt_in=opt_in)
    resolution = None
    if judge is not None:
        predictions, resolution = judge.resolve(benchmark, items, predictions)
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
    coverage["unresolved_share"] = _unresolved_share(result, coverage["answered"])
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
    )
    result["data"] = {
        "path": str(prepared.data_path),
        "image_root": str(prepared.image_root) if prepared.image_root else None,
        "limit": prepared.limit,
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
    allow_partial: bool = False,
    *,
    limit_seed: int = DEFAULT_LIMIT_SEED,
    limit_mode: str = DEFAULT_LIMIT_MODE,
) -> dict[str, Any]:
    """Score an existing predictions file without loading any model (``veritune eval score``), on the items
    ``limit`` keeps (drawn as ``eval run`` draws them): the items must all be answered (``allow_partial``: the
    answered ones are scored, labelled partial); no image is read, so the numbers never depend on the images
    being on disk. When the file's header says a blind control made it, the result keeps that mark as
    ``generation.blind``."""
    benchmark = get_benchmark(name)
    items, selection = select_items(
        benchmark, load_items(name, benchmark, data_path, image_root), limit, seed=limit_seed, mode=limit_mode
    )
    if not predictions_path.is_file():
        raise UserError(f"predictions file not found: {predictions_path}")
    header, predictions = read_predictions_file(predictions_path)
    for item in items:  # scoring reads no image: an item is answered or not, whatever is on disk now
        item.missing_images = []
    result = score_benchmark(name, items, predictions, judge, strict_official, allow_partial=allow_partial)
    result["selection"] = selection
    blind = ((header or {}).get("generation") or {}).get("blind")
    if isinstance(blind, dict):
        result["generation"] = {"blind": blind}
    return result


def headline_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The metrics worth a summary line: top-level ones and macro averages (not per class or subset)."""
    return {key: value for key, value in result["metrics"].items() if "/" not in key or key.startswith("macro/")}


def source_commit() -> str | None:
    """The git commit of the veritune checkout this code runs from (with ``-dirty`` when it has uncommitted
    changes); None outside a git checkout or without git."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}-dirty" if commit and dirty else commit or None


def results_record(results: dict[str, dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """What ``OUT/results.json`` of an ``eval run`` holds, in the spirit of lmms-eval's results file: per
    benchmark its headline metrics, coverage (:func:`coverage_of`), ``partial`` mark, scoring mode, the item
    selection when the run recorded one (``selection``), and where its metrics.json lies; then the run's
    settings, the veritune version and commit, and the date (UTC)."""
    import datetime

    from core.io import package_versions

    benchmarks = {}
    for name, result in results.items():
        entry: dict[str, Any] = {
            "metrics": headline_metrics(result),
            "lower_is_better": result.get("lower_is_better", []),
            "partial": bool(result.get("partial")),
            "coverage": result.get("coverage"),
            "strict_official": result.get("strict_official", False),
            "answer_resolution": result.get("answer_resolution"),
            "limit": (result.get("data") or {}).get("limit"),
            "blind": (result.get("generation") or {}).get("blind"),
            "metrics_file": f"{name}/{METRICS_FILE}",
        }
        selection = result.get("selection", (result.get("data") or {}).get("selection"))
        if selection is not None:  # how a limit picked the items (recorded by the run), passed through as it is
            entry["selection"] = selection
        benchmarks[name] = entry
    versions = package_versions(("transformers", "torch"))
    return {
        "results": benchmarks,
        "partial": sorted(name for name, entry in benchmarks.items() if entry["partial"]),
        "config": settings,
        "veritune_version": versions.pop("veritune"),
        "git_commit": source_commit(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
