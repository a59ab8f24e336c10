"""The result files: ``OUT/<benchmark>/metrics.json`` (its name, the selection a rescoring reads back from it and
the items it was scored on: :func:`prepare_as_evaluated`) and an ``eval run``'s ``OUT/results.json``
(:func:`results_record`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from core.errors import UserError
from eval_hooks.prepare import PreparedBenchmark, prepare_benchmark
from eval_hooks.registry import registered_benchmark
from eval_hooks.runner import PREDICTIONS_FILE
from eval_hooks.selection import DEFAULT_LIMIT_MODE, DEFAULT_LIMIT_SEED

METRICS_FILE = "metrics.json"
RESULTS_FILE = "results.json"  # one per `eval run`: every benchmark's headline metrics, coverage and the settings


def prepare_as_evaluated(name: str, result: dict[str, Any], metrics_dir: Path | None = None) -> PreparedBenchmark:
    """The items a ``metrics.json`` was scored on, prepared again from its ``data`` and ``selection`` (the same
    files, limit, seed and mode draw the same items): what a report or the demo's intervals resample. With
    ``metrics_dir``, the folder the ``metrics.json`` is in now: a data path that no longer exists is looked for
    where it lies relative to that folder as it lay relative to the folder the file was written in (a run moved
    together with its data, as a copied or moved demo folder: :func:`relocated`). ``name``, read from the run's
    folders, must be a registered benchmark (:func:`eval_hooks.registry.registered_benchmark`)."""
    registered_benchmark(name, Path(metrics_dir) / METRICS_FILE if metrics_dir is not None else METRICS_FILE)
    data = result.get("data") or {}
    limit, seed, mode = recorded_limit(result)

    def path(recorded: str) -> Path:
        return relocated(recorded, data.get("written_in"), metrics_dir)

    return prepare_benchmark(
        name,
        data={name: path(data["path"])},
        image_root=path(data["image_root"]) if data.get("image_root") else None,
        limit=limit,
        limit_seed=seed,
        limit_mode=mode,
    )


def relocated(recorded: str, written_in: str | None, now_in: Path | None) -> Path:
    """``recorded``, a path a result file names; if it no longer exists and the file moved from ``written_in`` to
    ``now_in``, the path at the same place relative to ``now_in``, when that exists.

    >>> str(relocated("/gone/demo/bench.csv", "/gone/demo/run/eval", Path("/tmp")))  # nothing there either
    '/gone/demo/bench.csv'
    """
    path = Path(recorded)
    if path.exists() or not written_in or now_in is None:
        return path
    moved = Path(os.path.normpath(now_in / os.path.relpath(path, written_in)))
    return moved if moved.exists() else path


def recorded_limit(record: dict[str, Any]) -> tuple[int | None, int, str]:
    """``(limit, seed, mode)`` that draw again the items of a ``metrics.json`` (its ``data.limit`` and
    ``selection``) or of a ``results.json`` entry (its ``limit`` and ``selection``)."""
    data, selection = record.get("data"), record.get("selection") or {}
    limit = data.get("limit") if isinstance(data, dict) else record.get("limit")
    seed = selection.get("seed") if selection.get("seed") is not None else DEFAULT_LIMIT_SEED
    # a result written before limits were sampled kept the first N
    mode = selection.get("mode", "first") if selection.get("mode") != "all" else DEFAULT_LIMIT_MODE
    return limit, seed, mode


def recorded_selection(predictions_path: Path, name: str) -> tuple[dict[str, Any], Path] | None:
    """The record of how the items of ``predictions_path`` were selected, and its file: the ``metrics.json``
    beside an ``OUT/<benchmark>/predictions.jsonl`` (``eval run``, ``eval watch``, the hook), else the run's
    ``OUT/results.json`` entry for ``name``; None for a predictions file with neither (made elsewhere)."""
    if Path(predictions_path).name != PREDICTIONS_FILE:
        return None
    folder = Path(predictions_path).parent
    for path, key in ((folder / METRICS_FILE, None), (folder.parent / RESULTS_FILE, name)):
        if not path.is_file() or (key is not None and folder.name != key):
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise UserError(f"{path}: not readable JSON ({err}); it records the run's --limit, seed and mode") from None
        if key is not None and isinstance(record, dict):
            record = (record.get("results") or {}).get(key)
        if isinstance(record, dict) and ("selection" in record or "data" in record or "limit" in record):
            return record, path
    return None


def rescore_limit(
    name: str,
    recorded: tuple[dict[str, Any], Path] | None,
    limit: int | None,
    seed: int | None,
    mode: str | None,
) -> tuple[int | None, int, str]:
    """``(limit, seed, mode)`` of a rescoring: the run's, ``recorded`` with the predictions
    (:func:`recorded_selection`), so that ``eval score`` needs no flag; without a record, the given values or
    the defaults. A given value that would draw other items than the run's is refused.

    Raises:
        UserError: a given ``limit``, ``seed`` or ``mode`` contradicts the record: one line naming both values.
    """
    if recorded is None:
        return limit, DEFAULT_LIMIT_SEED if seed is None else seed, DEFAULT_LIMIT_MODE if mode is None else mode
    record, source = recorded
    run_limit, run_seed, run_mode = recorded_limit(record)
    selection = record.get("selection") or {}
    available = (selection.get("available") or {}).get("units")
    everything = run_limit is None or selection.get("mode") == "all"  # no item was left out
    clashes = []
    keeps_all = everything and isinstance(available, int) and limit is not None and limit >= available
    if limit is not None and limit != run_limit and not keeps_all:
        clashes.append(f"--limit {limit} (the run's: {run_limit if run_limit is not None else 'none, every item'})")
    if not everything and mode is not None and mode != run_mode:
        clashes.append(f"--limit-mode {mode} (the run's: {run_mode})")
    if not everything and run_mode == "stratified" and seed is not None and seed != run_seed:
        clashes.append(f"--limit-seed {seed} (the run's: {run_seed})")
    if clashes:
        raise UserError(
            f"{name}: {'; '.join(clashes)} contradicts the selection recorded with the predictions in {source}; "
            "drop the flag (eval score reads the run's selection)"
        )
    return run_limit, run_seed, run_mode


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


def read_results_file(path: Path) -> dict[str, Any] | None:
    """The record of an ``eval run``'s ``OUT/results.json`` (:func:`results_record`); None when there is none.

    Raises:
        UserError: the file is not readable JSON, or not such a record.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: not readable JSON ({err}); move it away or choose another --out") from None
    if not isinstance(record, dict) or not isinstance(record.get("results"), dict):
        raise UserError(f"{path}: not an `eval run` results file (no 'results' object); choose another --out")
    return record


def _same_model(recorded: Any, model: Any) -> bool:
    if str(recorded) == str(model):
        return True
    return Path(str(recorded)).exists() and Path(str(recorded)).resolve() == Path(str(model)).resolve()


def _images(blind: Any) -> str:
    return f"blank {','.join(map(str, blind.get('fill', [])))} images (--blind)" if blind else "the real images"


def kept_results(previous: dict[str, Any] | None, names: list[str], settings: dict[str, Any], path: Path) -> dict:
    """What an earlier ``OUT/results.json`` (``previous``) keeps when a run of ``names`` writes it again: the
    entries and refusals of the other benchmarks (``{"results": ..., "refused": ...}``); a benchmark of
    ``names`` is replaced by this run's. They are kept only when made of the same model (``settings["model"]``)
    showing the same images (``settings["blind"]``), so that one file never mixes two models' numbers.

    Raises:
        UserError: the other benchmarks' results are of another model or blind setting: one line naming them.
    """
    if previous is None:
        return {"results": {}, "refused": {}}
    results = {name: entry for name, entry in previous["results"].items() if name not in names}
    refused = {name: text for name, text in (previous.get("refused") or {}).items() if name not in names}
    others = [*results, *(name for name in refused if name not in results)]
    config = previous.get("config") or {}
    if others:
        if not _same_model(config.get("model"), settings.get("model")):
            raise UserError(
                f"{path}: holds results of {', '.join(others)} for model {config.get('model')}; this run evaluates "
                f"{settings.get('model')}: choose another --out (nothing was written)"
            )
        if config.get("blind") != settings.get("blind"):
            raise UserError(
                f"{path}: holds results of {', '.join(others)} on {_images(config.get('blind'))}; this run shows "
                f"{_images(settings.get('blind'))}: choose another --out (nothing was written)"
            )
    return {"results": results, "refused": refused}


def results_record(
    results: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    refused: dict[str, str] | None = None,
    kept: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What ``OUT/results.json`` of an ``eval run`` holds, in the spirit of lmms-eval's results file: per
    benchmark its headline metrics, coverage (:func:`eval_hooks.coverage.coverage_of`), ``partial`` and
    ``mostly_unresolved`` marks, scoring mode, the item selection when the run recorded one (``selection``), and
    where its metrics.json lies; the benchmarks refused for their unresolved answers or a failed judge
    (``refused``: name -> the refusal); then the run's settings, the veritune version and commit, and the date
    (UTC). ``kept``: the other benchmarks' entries and refusals from an earlier run into the same folder
    (:func:`kept_results`), listed first, unchanged."""
    import datetime

    from core.io import package_versions

    kept = kept or {}
    benchmarks = dict(kept.get("results") or {})
    for name, result in results.items():
        entry: dict[str, Any] = {
            "metrics": headline_metrics(result),
            "lower_is_better": result.get("lower_is_better", []),
            "partial": bool(result.get("partial")),
            "mostly_unresolved": bool(result.get("mostly_unresolved")),
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
        "partial": sorted(name for name, entry in benchmarks.items() if entry.get("partial")),
        "mostly_unresolved": sorted(name for name, entry in benchmarks.items() if entry.get("mostly_unresolved")),
        "refused": {**(kept.get("refused") or {}), **(refused or {})},
        "config": settings,
        "veritune_version": versions.pop("veritune"),
        "git_commit": source_commit(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
