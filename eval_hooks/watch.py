"""``veritune eval watch RUN_DIR``: evaluate each ``checkpoint-N`` of a training run as it appears.

Idempotent and resumable: a checkpoint whose metrics exist is skipped, a half-evaluated one resumes from
its predictions file. Results go to ``RUN_DIR/eval/checkpoint-N/<benchmark>/``, the same place as the
in-training eval hook. Metrics are logged into the training run's W&B run (its id is read from
``RUN_DIR/wandb_run.json``) at the checkpoint's step. The watcher stops once training has finished (the
run's final ``trainer_state.json`` exists) and every checkpoint is evaluated, or after one pass with
``--once``. Fit to run as its own Slurm job beside training (``slurm/eval.sbatch watch``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from eval_hooks.evaluate import METRICS_FILE, evaluate

logger = logging.getLogger("veritune.eval")
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def ready_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints that are completely written (their trainer state is saved last), oldest first."""
    found = []
    for path in run_dir.glob("checkpoint-*"):
        match = CHECKPOINT.match(path.name)
        if match and (path / "trainer_state.json").is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def is_evaluated(run_dir: Path, step: int, benchmarks: list[str]) -> bool:
    return all((run_dir / "eval" / f"checkpoint-{step}" / name / METRICS_FILE).is_file() for name in benchmarks)


def _wandb_run(run_dir: Path) -> Any:
    info_file = run_dir / "wandb_run.json"
    if not info_file.is_file():
        return None
    try:
        import wandb
    except ImportError:
        return None
    info = json.loads(info_file.read_text())
    return wandb.init(id=info["id"], project=info.get("project"), entity=info.get("entity"), resume="allow", dir=str(run_dir))


def watch(
    run_dir: Path,
    benchmarks: list[str],
    *,
    data_root: Path | None = None,
    data: dict[str, Path] | None = None,
    image_root: Path | None = None,
    limit: int | None = None,
    batch_size: int = 8,
    interval: float = 60.0,
    once: bool = False,
    timeout: float | None = None,
) -> list[int]:
    """Evaluate checkpoints until the run is finished; returns the steps evaluated by this call."""
    from eval_hooks.runner import load_model

    evaluated: list[int] = []
    started = time.monotonic()
    run = None
    while True:
        for step, path in ready_checkpoints(run_dir):
            if is_evaluated(run_dir, step, benchmarks):
                continue
            logger.info("evaluating %s", path)
            model, processor = load_model(path)
            results = evaluate(model, processor, benchmarks, run_dir / "eval" / f"checkpoint-{step}", data_root=data_root,
                               data=data, image_root=image_root, limit=limit, batch_size=batch_size)  # fmt: skip
            evaluated.append(step)
            run = run or _wandb_run(run_dir)
            if run is not None:
                metrics = {f"eval/{name}/{k}": v for name, r in results.items() for k, v in r["metrics"].items()}
                run.log({**metrics, "train/global_step": step})
            print(f"checkpoint-{step}: " + ", ".join(f"{n}: {json.dumps({k: round(v, 2) for k, v in r['metrics'].items() if k.startswith('macro/') or '/' not in k})}" for n, r in results.items()), flush=True)
        finished = (run_dir / "trainer_state.json").is_file() and all(is_evaluated(run_dir, s, benchmarks) for s, _ in ready_checkpoints(run_dir))
        if once or finished or (timeout is not None and time.monotonic() - started > timeout):
            break
        time.sleep(interval)
    if run is not None:
        run.finish()
    return evaluated
