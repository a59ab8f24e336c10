"""``veritune eval watch RUN_DIR``: evaluate each ``checkpoint-N`` of a training run as it appears.

Meant to run as its own job beside training (``sbatch slurm/eval.sbatch watch RUN_DIR ...``), on its own
GPU, so training never waits for evaluation (and under DeepSpeed ZeRO-3 the eval model is whole here).

- A checkpoint is evaluated once it is completely written: the Trainer saves ``trainer_state.json``
  last, after the weights, the optimizer state and the processor.
- Results go to ``RUN_DIR/eval/checkpoint-N/<benchmark>/{predictions.jsonl,metrics.json}``, the same
  place as the in-training eval hook's. A checkpoint whose ``metrics.json`` files all exist is skipped;
  a half-evaluated one resumes from its ``predictions.jsonl``. So the watcher can be killed and
  restarted at any time (Slurm preemption, a time limit) and redoes nothing.
- Metrics and tables are logged into the training run's W&B run, whose id the training writes to
  ``RUN_DIR/wandb_run.json``, at the checkpoint's step (``train/global_step``). ``WANDB_MODE`` is
  respected: ``offline`` writes a local run to sync later, ``disabled`` logs nothing. Online, the watcher
  joins the run in W&B's shared mode, as a secondary writer that never marks the run finished.
- It stops when training has finished (``RUN_DIR/trainer_state.json``, written by the Trainer at the end,
  reaches the newest checkpoint's step) and every checkpoint is evaluated; or after one pass with
  ``--once``; or when no new checkpoint has appeared for ``--timeout`` seconds.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from eval_hooks.evaluate import METRICS_FILE, PreparedBenchmark, evaluate, headline_metrics
from veritune.core.run_layout import WANDB_RUN_FILE, checkpoint_eval_dir, checkpoints, is_saved_checkpoint

logger = logging.getLogger("veritune.eval")


def ready_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints that are completely written (their trainer state is saved last), oldest first."""
    return [(step, path) for step, path in checkpoints(run_dir) if is_saved_checkpoint(path)]


def is_evaluated(run_dir: Path, step: int, benchmarks: list[str]) -> bool:
    """Whether every benchmark's ``metrics.json`` exists for checkpoint ``step``."""
    return all((checkpoint_eval_dir(run_dir, step) / name / METRICS_FILE).is_file() for name in benchmarks)


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
    from eval_hooks.callback import wandb_payload
    from veritune.core.errors import UserError

    run_dir = Path(run_dir)
    names = [entry.name for entry in prepared]
    evaluated: list[int] = []
    failed: set[int] = set()
    last_new = time.monotonic()
    run = None
    try:
        while True:
            for step, path in ready_checkpoints(run_dir):
                if step in failed or is_evaluated(run_dir, step, names):
                    continue
                logger.info("evaluating %s", path)
                try:
                    results = evaluate_checkpoint(
                        path, step, run_dir, prepared, batch_size=batch_size, backend=backend, dtype=dtype, judge=judge
                    )
                except UserError as err:  # e.g. deleted by save_total_limit while loading: go on with the others
                    logger.error("checkpoint-%d skipped: %s", step, err)
                    failed.add(step)
                    continue
                evaluated.append(step)
                last_new = time.monotonic()
                run = run or open_wandb_run(run_dir)
                if run is not None:
                    import wandb

                    run.log(wandb_payload(results, step, wandb))
                line = "; ".join(
                    f"{name}{' (partial)' if r.get('partial') else ''} "
                    + ", ".join(f"{k}={v:.2f}" for k, v in headline_metrics(r).items())
                    for name, r in results.items()
                )
                print(f"checkpoint-{step}: {line}", flush=True)
            pending = [
                s for s, _ in ready_checkpoints(run_dir) if s not in failed and not is_evaluated(run_dir, s, names)
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
