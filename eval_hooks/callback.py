"""The eval hook: after each checkpoint save, evaluate that checkpoint and log the metrics.

Recipes enable it by name (``eval_on_save: true``, ``eval_benchmarks: [oric_bench_r1]``, ``eval_limit``
for quick hooks). Results land in ``OUTPUT_DIR/eval/checkpoint-N/<benchmark>/``; metrics are logged as
``eval/<benchmark>/<metric>`` at the checkpoint's step to W&B (with per-category tables and sample
predictions) and into the trainer's log history. An eval failure is logged and never stops training.

The live model is evaluated in-process on the main process. Under DeepSpeed ZeRO-3 the weights are
sharded across ranks, so run ``veritune eval watch`` as a separate job instead.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger("veritune.eval")


def flat_metrics(name: str, result: dict[str, Any]) -> dict[str, float]:
    return {f"eval/{name}/{key}": float(value) for key, value in result["metrics"].items()}


def log_to_wandb(results: dict[str, dict[str, Any]], step: int, predictions_dir: Path) -> None:
    """Log metrics, per-category tables and a sample of predictions to the active W&B run."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        return
    payload: dict[str, Any] = {}
    for name, result in results.items():
        payload.update(flat_metrics(name, result))
        for table_name, rows in result.get("tables", {}).items():
            if rows:
                columns = sorted({key for row in rows for key in row})
                payload[f"eval/{name}/{table_name}"] = wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in rows])
        sample = (predictions_dir / name / "predictions.jsonl").read_text(encoding="utf-8").splitlines()[:20]
        if sample:
            import json

            rows = [json.loads(line) for line in sample]
            payload[f"eval/{name}/samples"] = wandb.Table(columns=["id", "prediction"], data=[[r["id"], r["prediction"]] for r in rows])
    payload["train/global_step"] = step
    wandb.log(payload)


class EvalHookCallback(TrainerCallback):
    """Evaluate every saved checkpoint on ``benchmarks`` (see the module docstring)."""

    def __init__(
        self,
        benchmarks: list[str],
        data_root: str | None,
        *,
        limit: int | None = None,
        batch_size: int = 8,
        data: dict[str, str] | None = None,
        image_root: str | None = None,
    ) -> None:
        self.benchmarks = benchmarks
        self.data_root = Path(data_root) if data_root else None
        self.data = {k: Path(v) for k, v in (data or {}).items()}
        self.image_root = Path(image_root) if image_root else None
        self.limit = limit
        self.batch_size = batch_size
        self.processor: Any = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.processor = kwargs.get("processing_class")

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        model = kwargs.get("model")
        out_dir = Path(args.output_dir) / "eval" / f"checkpoint-{state.global_step}"
        try:
            from eval_hooks.evaluate import evaluate

            was_training = model.training
            model.eval()
            try:
                results = evaluate(
                    model, self.processor, self.benchmarks, out_dir, data_root=self.data_root, data=self.data,
                    image_root=self.image_root, limit=self.limit, batch_size=self.batch_size,
                )  # fmt: skip
            finally:
                model.train(was_training)
        except Exception as err:  # noqa: BLE001 - an eval failure must never stop training
            logger.error("eval hook failed at step %d (training continues): %s: %s", state.global_step, type(err).__name__, err)
            return
        metrics = {key: value for name, result in results.items() for key, value in flat_metrics(name, result).items()}
        state.log_history.append({**metrics, "step": state.global_step})
        log_to_wandb(results, state.global_step, out_dir)
        logger.info("eval at step %d: %s", state.global_step, {k: round(v, 2) for k, v in metrics.items() if k.endswith("f1")})
