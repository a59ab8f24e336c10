"""What the entry scripts share around TRL's trainers: logging, model + processor + LoRA loading,
callbacks (eval hooks, W&B run settings) and checkpoint resumption."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import transformers
from transformers import TrainerCallback, TrainingArguments

from finetune.configs import ScriptArguments, VeritunModelConfig
from finetune.models import count_parameters, get_lora_config, get_model, get_processor
from veritune.errors import UserError
from veritune.io import atomic_write_json, read_yaml

logger = logging.getLogger("veritune")

WANDB_RUN_FILE = "wandb_run.json"
PROVENANCE_FILE = "veritune_run.json"
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")


def setup_logging(training_args: TrainingArguments) -> None:
    """INFO logs on the main process only, in the format transformers uses."""
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level, force=True)
    transformers.utils.logging.set_verbosity(level if level == logging.WARNING else logging.WARNING)


def configure_wandb(script_args: ScriptArguments, training_args: TrainingArguments) -> None:
    """W&B run settings from the recipe (project, group, tags); files go under the run directory."""
    if "wandb" not in (training_args.report_to or []):
        return
    if script_args.wandb_project:
        os.environ.setdefault("WANDB_PROJECT", script_args.wandb_project)
    if script_args.wandb_group:
        os.environ.setdefault("WANDB_RUN_GROUP", script_args.wandb_group)
    if script_args.wandb_tags:
        os.environ.setdefault("WANDB_TAGS", ",".join(script_args.wandb_tags))
    os.environ.setdefault("WANDB_DIR", str(Path(training_args.output_dir).resolve()))
    Path(os.environ["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)


def get_model_and_processor(model_args: VeritunModelConfig) -> tuple[Any, Any, Any]:
    """The policy model, its processor, and the LoRA config (None for full-parameter training)."""
    processor = get_processor(model_args)
    model = get_model(model_args)
    return model, processor, get_lora_config(model_args)


def log_run_header(trainer: Any, script_args: ScriptArguments, model_args: VeritunModelConfig, data_summary: str) -> None:
    """Log what is being trained: trainable parameters (after LoRA wrapping) and the data kept."""
    trainable, total = count_parameters(trainer.model)
    mode = "LoRA" if model_args.use_peft else "full-parameter"
    logger.info(
        "%s training of %s: %s trainable of %s parameters (%.2f%%); %s",
        mode,
        model_args.model_name_or_path,
        f"{trainable:,}",
        f"{total:,}",
        100.0 * trainable / max(total, 1),
        data_summary,
    )


def run_provenance(script_args: ScriptArguments) -> dict[str, Any]:
    """What a run was made from: the script settings, the recipe file's contents and the dataset's
    ``manifest.json`` (written by veritune's builders beside their output), when present."""
    provenance: dict[str, Any] = {"script_args": vars(script_args)}
    if script_args.recipe and Path(script_args.recipe).is_file():
        provenance["recipe"] = read_yaml(script_args.recipe)
    if script_args.dataset_path:
        dataset = Path(script_args.dataset_path)
        manifest = (dataset if dataset.is_dir() else dataset.parent) / "manifest.json"
        if manifest.is_file():
            provenance["dataset_manifest"] = json.loads(manifest.read_text(encoding="utf-8"))
    return provenance


class RunConfigCallback(TrainerCallback):
    """Record the run's provenance beside its checkpoints and in the W&B run config."""

    def __init__(self, script_args: ScriptArguments) -> None:
        self.script_args = script_args

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        provenance = run_provenance(self.script_args)
        atomic_write_json(Path(args.output_dir) / PROVENANCE_FILE, provenance)
        try:
            import wandb
        except ImportError:
            return
        if wandb.run is not None:
            wandb.run.config.update({"veritune": provenance}, allow_val_change=True)
            # `eval watch` and later eval jobs log into this same run: they read its id from here.
            atomic_write_json(
                Path(args.output_dir) / WANDB_RUN_FILE,
                {"id": wandb.run.id, "project": wandb.run.project, "entity": wandb.run.entity, "group": wandb.run.group},
            )


def get_callbacks(script_args: ScriptArguments, training_args: TrainingArguments) -> list[TrainerCallback]:
    """Callbacks every entry script adds: W&B settings and, when enabled, the eval hooks."""
    configure_wandb(script_args, training_args)
    callbacks: list[TrainerCallback] = [RunConfigCallback(script_args)]
    if script_args.eval_on_save and script_args.eval_benchmarks:
        from eval_hooks.callback import EvalHookCallback

        data = dict(entry.split("=", 1) for entry in script_args.eval_data if "=" in entry)
        callbacks.append(
            EvalHookCallback(
                script_args.eval_benchmarks,
                script_args.eval_data_root,
                limit=script_args.eval_limit,
                batch_size=script_args.eval_batch_size,
                data=data,
                image_root=script_args.eval_image_root,
                at_start=script_args.eval_at_start,
            )
        )
    return callbacks


def is_complete_checkpoint(path: Path) -> bool:
    """A checkpoint can be resumed from when its weights, trainer state and optimizer state were all saved."""
    has_weights = any((path / name).exists() for name in _WEIGHT_FILES)
    has_state = (path / "trainer_state.json").is_file()
    has_optimizer = (path / "optimizer.pt").is_file() or any(path.glob("global_step*"))
    return has_weights and has_state and has_optimizer


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``output_dir``; incomplete ones are skipped with a warning.

    Raises:
        UserError: checkpoints exist but none is complete.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    checkpoints = sorted(
        (p for p in output_dir.iterdir() if p.is_dir() and _CHECKPOINT_DIR.match(p.name)),
        key=lambda p: int(_CHECKPOINT_DIR.match(p.name).group(1)),  # type: ignore[union-attr]
        reverse=True,
    )
    for checkpoint in checkpoints:
        if is_complete_checkpoint(checkpoint):
            return checkpoint
        logger.warning("skipping incomplete checkpoint %s (weights, trainer state or optimizer state missing)", checkpoint)
    if checkpoints:
        raise UserError(
            f"{output_dir}: no complete checkpoint to resume from ({len(checkpoints)} incomplete); "
            "remove them or choose a fresh output_dir to start over"
        )
    return None


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """What to pass to ``trainer.train(resume_from_checkpoint=...)``.

    ``auto`` resumes from the newest complete checkpoint in ``output_dir`` and starts fresh when there is
    none yet; any other value is a checkpoint path, used as given.
    """
    value = training_args.resume_from_checkpoint
    if value is None:
        return None
    if value == "auto":
        found = find_resumable_checkpoint(training_args.output_dir)
        if found is None:
            logger.info("resume_from_checkpoint: auto found no checkpoint in %s; starting fresh", training_args.output_dir)
            return None
        logger.info("resuming from %s", found)
        return str(found)
    if not Path(value).is_dir():
        raise UserError(f"resume_from_checkpoint: {value} is not a checkpoint directory")
    return value


def train_and_save(trainer: Any, processor: Any, training_args: TrainingArguments) -> None:
    """Train (resuming as the recipe says), then save metrics, trainer state, weights and processor."""
    result = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(training_args.output_dir)
    logger.info("model saved to %s", training_args.output_dir)
