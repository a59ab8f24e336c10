"""``veritune eval watch RUN_DIR``: evaluate each ``checkpoint-N`` of a training run as it appears.

Meant to run as its own job beside training (``sbatch slurm/eval.sbatch watch RUN_DIR ...``), on its own
GPU, so training never waits for evaluation (and under DeepSpeed ZeRO-3 the eval model is whole here).

- A checkpoint is evaluated once it is completely written: the Trainer saves ``trainer_state.json``
  last, after the weights, the optimizer state and the processor.
- Results go to ``RUN_DIR/eval/checkpoint-N/<benchmark>/{predictions.jsonl,metrics.json}``, the same
  place as the in-training eval hook's. A checkpoint is done when everything asked of it is: every
  ``metrics.json`` exists and, when the run logs to W&B, ``eval/checkpoint-N/wandb_logged.json`` says its
  metrics reached the W&B run (written after they did). A done checkpoint is skipped; an evaluated one not
  yet in W&B has its metrics logged from the ``metrics.json`` files, without evaluating again; a
  half-evaluated one resumes from its ``predictions.jsonl``. So the watcher can be killed and restarted at
  any time (Slurm preemption, a time limit, a W&B failure) and redoes nothing.
- Metrics and tables are logged into the training run's W&B run, whose id the training writes to
  ``RUN_DIR/wandb_run.json``, at the checkpoint's step (``train/global_step``). ``WANDB_MODE`` is
  respected: ``offline`` writes a local run to sync later, ``disabled`` logs nothing. Online, the watcher
  joins the run in W&B's shared mode, as a secondary writer that never marks the run finished; without W&B
  credentials it stops at once with one line (:func:`core.wandb_login.require_wandb_login`).
- Results already in ``RUN_DIR/eval/checkpoint-N/<benchmark>/`` made on other items (another data file,
  limit, seed, mode or ``--max-new-tokens``: their ``metrics.json`` or ``predictions.jsonl`` header records
  the items' fingerprint) are refused with one line naming what differs, before anything is evaluated:
  a watcher never mixes two settings in one curve, nor reports old results as the new ones.
- Started before training has made ``RUN_DIR`` (a watcher job queued first), it waits for the folder
  (``--wait``: at most that many seconds).
- It stops when training has finished (``RUN_DIR/trainer_state.json``, written by the Trainer at the end,
  reaches the newest checkpoint's step) and every checkpoint is evaluated; or after one pass with
  ``--once``; or when no new checkpoint has appeared for ``--timeout`` seconds.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json
from core.run_layout import (
    WANDB_LOGGED_FILE,
    WANDB_RUN_FILE,
    checkpoint_eval_dir,
    checkpoints,
    is_saved_checkpoint,
)
from eval_hooks.coverage import benchmark_label
from eval_hooks.evaluate import evaluate
from eval_hooks.prepare import PreparedBenchmark
from eval_hooks.results import METRICS_FILE, headline_metrics
from eval_hooks.runner import PREDICTIONS_FILE, items_fingerprint, read_predictions_file

logger = logging.getLogger("veritune.eval")


def ready_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints that are completely written (their trainer state is saved last), oldest first."""
    return [(step, path) for step, path in checkpoints(run_dir) if is_saved_checkpoint(path)]


def is_evaluated(run_dir: Path, step: int, benchmarks: list[str]) -> bool:
    """Whether every benchmark's ``metrics.json`` exists for checkpoint ``step``."""
    return all((checkpoint_eval_dir(run_dir, step) / name / METRICS_FILE).is_file() for name in benchmarks)


def logs_to_wandb(run_dir: Path) -> bool:
    """Whether the watcher logs into a W&B run: the training wrote ``wandb_run.json``, ``WANDB_MODE`` is not
    ``disabled`` and wandb is installed."""
    if not (Path(run_dir) / WANDB_RUN_FILE).is_file() or os.environ.get("WANDB_MODE") == "disabled":
        return False
    import importlib.util

    return importlib.util.find_spec("wandb") is not None


def is_logged(run_dir: Path, step: int) -> bool:
    """Whether checkpoint ``step``'s metrics were logged to the training's W&B run."""
    return (checkpoint_eval_dir(run_dir, step) / WANDB_LOGGED_FILE).is_file()


def is_done(run_dir: Path, step: int, benchmarks: list[str], wandb_wanted: bool) -> bool:
    """Everything asked of checkpoint ``step`` is done: evaluated, and logged to W&B when ``wandb_wanted``."""
    return is_evaluated(run_dir, step, benchmarks) and (not wandb_wanted or is_logged(run_dir, step))


def saved_results(run_dir: Path, step: int, benchmarks: list[str]) -> dict[str, dict[str, Any]]:
    """The results of an evaluated checkpoint, read back from its ``metrics.json`` files."""
    return {
        name: json.loads((checkpoint_eval_dir(run_dir, step) / name / METRICS_FILE).read_text(encoding="utf-8"))
        for name in benchmarks
    }


def _limit_text(limit: Any) -> str:
    return "none (every item)" if limit is None else str(limit)


def _differences(record: dict[str, Any], entry: PreparedBenchmark) -> str:
    """What the settings ``record`` (a ``metrics.json``) was made with differ in from ``entry``'s, as text."""
    data = record.get("data") or {}
    selection = record.get("selection") or {}
    budget = (record.get("generation") or {}).get("max_new_tokens")
    wanted_budget = entry.max_new_tokens or sorted({item.max_new_tokens for item in entry.items})
    parts = []
    if "limit" in data and data["limit"] != entry.limit:
        parts.append(f"limit {_limit_text(data['limit'])} (this watch: {_limit_text(entry.limit)})")
    if data.get("path") and Path(data["path"]).resolve() != Path(entry.data_path).resolve():
        parts.append(f"data {data['path']} (this watch: {entry.data_path})")
    for key in ("mode", "seed"):
        if selection.get(key) != entry.selection.get(key) and not parts:
            parts.append(f"limit {key} {selection.get(key)} (this watch: {entry.selection.get(key)})")
    if budget is not None and budget != wanted_budget:
        parts.append(f"max_new_tokens {budget} (this watch: {wanted_budget})")
    if parts:
        return "; ".join(parts)
    if data:
        return f"other items (the contents of {entry.data_path} changed)"
    return "other items (another data file, limit, seed, mode or --max-new-tokens than this watch's)"


def recorded_mismatch(run_dir: Path, step: int, entry: PreparedBenchmark) -> str | None:
    """Why checkpoint ``step``'s results for ``entry`` (its ``metrics.json``, else its ``predictions.jsonl``
    header) were made on other items than ``entry``'s: another data file, limit, seed, mode or budget. None
    when they were made on the same items, or record no items' fingerprint to compare."""
    folder = checkpoint_eval_dir(run_dir, step) / entry.name
    metrics_path, predictions_path = folder / METRICS_FILE, folder / PREDICTIONS_FILE
    record: dict[str, Any] = {}
    if metrics_path.is_file():
        source = metrics_path
        try:
            record = json.loads(metrics_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise UserError(f"{metrics_path}: not readable JSON ({err})") from None
        record = record if isinstance(record, dict) else {}
        data = (record.get("provenance") or {}).get("data")
    elif predictions_path.is_file():
        source = predictions_path
        header, _ = read_predictions_file(predictions_path)
        data = (header or {}).get("data")
    else:
        return None
    if not isinstance(data, dict) or data.get("sha256") in (None, items_fingerprint(entry.items)):
        return None
    return f"{source}: made with {_differences(record, entry)}"


def check_recorded_settings(run_dir: Path, step: int, prepared: list[PreparedBenchmark]) -> None:
    """Refuse results of checkpoint ``step`` made on other items than this watch asks (:func:`recorded_mismatch`).

    Raises:
        UserError: one line naming the file and what differs.
    """
    for entry in prepared:
        reason = recorded_mismatch(run_dir, step, entry)
        if reason:
            raise UserError(
                f"eval watch: {reason}; rerun eval watch with the run's settings, or evaluate these with "
                f"eval run --model {Path(run_dir) / f'checkpoint-{step}'} --out DIR"
            )


def wait_for_run_dir(run_dir: Path, *, interval: float, wait: float | None) -> None:
    """Return once ``run_dir`` exists: a watcher started before training has made its folder waits for it,
    looking every ``interval`` seconds, at most ``wait`` seconds (None: until it appears).

    Raises:
        UserError: ``run_dir`` is not a directory, or has not appeared after ``wait`` seconds.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"{run_dir}: not a directory (the training run's output_dir)")
    if run_dir.is_dir():
        return
    limit = "" if wait is None else f" (at most {wait:g} s)"
    print(f"waiting for {run_dir} to appear: training has not made it yet{limit}", file=sys.stderr, flush=True)
    started = time.monotonic()
    while not run_dir.is_dir():
        left = None if wait is None else wait - (time.monotonic() - started)
        if left is not None and left <= 0:
            raise UserError(f"run directory not found: {run_dir} (waited {wait:g} s, --wait)")
        time.sleep(interval if left is None else min(interval, left))
    print(f"{run_dir} appeared; watching it", file=sys.stderr, flush=True)


def training_finished(run_dir: Path) -> bool:
    """The Trainer writes ``RUN_DIR/trainer_state.json`` when training ends; a file left from an earlier,
    shorter run does not count once newer checkpoints exist."""
    final = Path(run_dir) / "trainer_state.json"
    if not final.is_file():
        return False
    try:
        final_step = int(json.loads(final.read_text(encoding="utf-8")).get("global_step", 0))
    except (ValueError, OSError, AttributeError):
        return False
    return all(step <= final_step for step, _ in ready_checkpoints(run_dir))


def open_wandb_run(run_dir: Path) -> Any:
    """The training run's W&B run, resumed from ``RUN_DIR/wandb_run.json``; None without one."""
    info_file = Path(run_dir) / WANDB_RUN_FILE
    if not info_file.is_file() or os.environ.get("WANDB_MODE") == "disabled":
        return None
    try:
        import wandb
    except ImportError:
        return None
    info = json.loads(info_file.read_text(encoding="utf-8"))
    mode = os.environ.get("WANDB_MODE", "online")
    settings = None
    if mode in ("online", "run"):  # the training may still be writing to this run: join as a secondary writer
        settings = wandb.Settings(mode="shared", x_primary=False, x_label="eval-watch", x_update_finish_state=False)
    run = wandb.init(
        id=info["id"],
        project=info.get("project"),
        entity=info.get("entity"),
        group=info.get("group"),
        resume="allow",
        dir=str(run_dir),
        settings=settings,
    )
    run.define_metric("train/global_step")
    run.define_metric("eval/*", step_metric="train/global_step")
    return run


def evaluate_checkpoint(
    path: Path,
    step: int,
    run_dir: Path,
    prepared: list[PreparedBenchmark],
    *,
    batch_size: int,
    backend: str,
    dtype: str,
    judge: Any = None,
) -> dict[str, dict[str, Any]]:
    """Load one checkpoint, evaluate it into ``RUN_DIR/eval/checkpoint-N/``, free the model."""
    from eval_hooks.runner import get_backend

    model_backend = get_backend(backend, path, dtype)
    try:
        return evaluate(model_backend, prepared, checkpoint_eval_dir(run_dir, step), batch_size=batch_size, judge=judge)
    finally:
        del model_backend
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


def watch(
    run_dir: Path,
    prepared: list[PreparedBenchmark],
    *,
    batch_size: int = 8,
    interval: float = 60.0,
    once: bool = False,
    idle_timeout: float | None = None,
    backend: str = "transformers",
    dtype: str = "auto",
    judge: Any = None,
) -> list[int]:
    """Evaluate checkpoints of ``run_dir`` until the run is finished (see the module docstring); returns
    the steps evaluated by this call."""
    from core.wandb_login import require_wandb_login
    from eval_hooks.callback import wandb_payload

    run_dir = Path(run_dir)
    names = [entry.name for entry in prepared]
    login_checked = False
    evaluated: list[int] = []
    failed: set[int] = set()
    settings_checked: set[int] = set()  # evaluated checkpoints whose recorded items match this watch's
    last_new = time.monotonic()
    run = None
    try:
        while True:
            wandb_wanted = logs_to_wandb(run_dir)  # the training writes wandb_run.json when it starts
            if wandb_wanted and not login_checked:
                where = f"{run_dir}: the training logs to W&B ({WANDB_RUN_FILE})"
                require_wandb_login(["wandb"], where, "set WANDB_MODE=disabled to log nothing")
                login_checked = True
            for step, _ in ready_checkpoints(run_dir):  # before anything is evaluated in this pass
                if step not in settings_checked:
                    check_recorded_settings(run_dir, step, prepared)
                    if is_evaluated(run_dir, step, names):
                        settings_checked.add(step)
            for step, path in ready_checkpoints(run_dir):
                if step in failed or is_done(run_dir, step, names, wandb_wanted):
                    continue
                if is_evaluated(run_dir, step, names):  # evaluated before, its W&B logging left undone
                    logger.info("checkpoint-%d: evaluated before; logging its metrics to W&B", step)
                    results = saved_results(run_dir, step, names)
                else:
                    logger.info("evaluating %s", path)
                    try:
                        results = evaluate_checkpoint(
                            path,
                            step,
                            run_dir,
                            prepared,
                            batch_size=batch_size,
                            backend=backend,
                            dtype=dtype,
                            judge=judge,
                        )
                    except UserError as err:  # e.g. deleted by save_total_limit while loading: go on with the others
                        logger.error("checkpoint-%d skipped: %s", step, err)
                        failed.add(step)
                        continue
                    evaluated.append(step)
                last_new = time.monotonic()
                if wandb_wanted:
                    run = run or open_wandb_run(run_dir)
                    import wandb

                    run.log(wandb_payload(results, step, wandb))
                    atomic_write_json(
                        checkpoint_eval_dir(run_dir, step) / WANDB_LOGGED_FILE, {"run": run.id, "step": step}
                    )
                line = "; ".join(
                    f"{benchmark_label(name, r)} " + ", ".join(f"{k}={v:.2f}" for k, v in headline_metrics(r).items())
                    for name, r in results.items()
                )
                print(f"checkpoint-{step}: {line}", flush=True)
            pending = [
                s
                for s, _ in ready_checkpoints(run_dir)
                if s not in failed and not is_done(run_dir, s, names, wandb_wanted)
            ]
            if once or (not pending and training_finished(run_dir)):
                break
            if pending:  # a checkpoint appeared while the last one was evaluated
                continue
            if idle_timeout is not None and time.monotonic() - last_new > idle_timeout:
                logger.warning("no new checkpoint in %s for %.0f s; stopping", run_dir, idle_timeout)
                break
            time.sleep(interval)
    finally:
        if run is not None:
            run.finish()
    return evaluated
