"""What a training run shows on the console: logging set-up, one compact line per logging step (the full
log dict goes to ``OUTPUT_DIR/train_log.jsonl``, W&B and ``trainer_state.json``) and the run's header line."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import transformers
from transformers import TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from core.quiet import hide_model_file_bars, quiet_wandb, use_cpu_accelerator_without_gpu
from finetune.configs import ScriptArguments, VerituneModelConfig
from finetune.models import count_parameters

logger = logging.getLogger("veritune")


def setup_logging(training_args: TrainingArguments) -> None:
    """INFO logs on the main process only, in the format transformers uses."""
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level, force=True)
    transformers.utils.logging.set_verbosity(level if level == logging.WARNING else logging.WARNING)
    use_cpu_accelerator_without_gpu()
    hide_model_file_bars()
    quiet_wandb()


# ---- console output: one compact line per logging step (the full dict goes to TRAIN_LOG_FILE and W&B)

TRAIN_LOG_FILE = "train_log.jsonl"
# (key in TRL's logs, label on the console), in the order shown; `rewards/<name>/mean` are added after `reward`.
# `dynamic_sampling/rounds` counts the step's sampling rounds, the first included; the console shows the extra
# rounds (that count less 1), the number `dynamic_sampling_max_rounds` bounds, as `extra_rounds 3/3`.
CONSOLE_KEYS = [
    ("loss", "loss"),
    ("reward", "reward"),
    ("reward_std", "±"),
    ("rewards/accuracies", "pref_acc"),
    ("rewards/margins", "margin"),
    ("kl", "kl"),
    ("entropy", "entropy"),
    ("frac_reward_zero_std", "zero_std"),
    ("dynamic_sampling/kept_share", "kept"),
    ("dynamic_sampling/rounds", "extra_rounds"),
    ("dynamic_sampling/prompts_drawn", "drawn"),
    ("dynamic_sampling/filled_groups", "filled"),
    ("completions/mean_length", "len"),
    ("grad_norm", "grad"),
    ("learning_rate", "lr"),
]


def compact_log_line(
    logs: dict[str, Any], step: int, max_steps: int, *, max_extra_rounds: int | None = None
) -> str | None:
    """One short console line for a trainer log dict, or None for logs that are not per-step training logs
    (the eval hooks' metrics print their own line once per checkpoint). ``max_extra_rounds``: the recipe's
    ``dynamic_sampling_max_rounds``, shown beside the step's extra rounds (``extra_rounds 3/3``)."""
    if "eval_loss" in logs:  # the Trainer's own evaluation (DPO's validation split): one line, same keys
        line = compact_log_line({key.removeprefix("eval_"): value for key, value in logs.items()}, step, max_steps)
        return None if line is None else "eval " + line
    if any(key.startswith("eval_") for key in logs) and "loss" not in logs:
        return None  # the eval hooks' metrics: the hook prints its own line
    if "train_runtime" in logs:
        loss = logs.get("train_loss")
        return (
            f"done: {step} steps in {logs['train_runtime']:.0f} s ({logs.get('train_steps_per_second', 0):.3g} steps/s)"
            + (f", mean loss {loss:.4g}" if isinstance(loss, (int, float)) else "")
        )
    parts = [f"step {step}/{max_steps}"]
    for key, label in CONSOLE_KEYS:
        value = logs.get(key)
        if key == "dynamic_sampling/rounds" and isinstance(value, (int, float)):
            limit = f"/{max_extra_rounds}" if isinstance(max_extra_rounds, int) else ""
            parts.append(f"{label} {value - 1:.3g}{limit}")
        elif isinstance(value, (int, float)):
            parts.append(f"{label} {value:.3g}" if label != "±" else f"± {value:.3g}")
        if key == "reward":
            for name, reward in logs.items():
                match = re.fullmatch(r"rewards/(.+?)(?:_reward)?/mean", name)
                if match and isinstance(reward, (int, float)):
                    parts.append(f"{match.group(1)} {reward:.3g}")
    return " | ".join(parts)


class CompactProgressCallback(ProgressCallback):
    """transformers' progress bar, but each log is one compact line instead of the full dict (~30 keys,
    lines over 1,000 characters); the full dict is appended to ``OUTPUT_DIR/train_log.jsonl`` (and goes
    to W&B and ``trainer_state.json`` as before)."""

    def on_log(
        self, args: TrainingArguments, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        record = {**logs, "step": state.global_step}
        try:
            with open(Path(args.output_dir) / TRAIN_LOG_FILE, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, default=str) + "\n")
        except OSError as err:  # the console line still shows; the trainer state keeps the history
            logger.warning("could not append to %s: %s", TRAIN_LOG_FILE, err)
        max_extra_rounds = getattr(args, "dynamic_sampling_max_rounds", None)  # GRPO's recipe key, else None
        line = compact_log_line(logs, state.global_step, state.max_steps, max_extra_rounds=max_extra_rounds)
        if line is None:
            return
        if self.training_bar is not None:
            self.training_bar.write(line)
        else:
            print(line, flush=True)


def use_compact_progress(trainer: Any) -> None:
    """Swap the trainer's progress printer (``ProgressCallback``, or ``PrinterCallback`` with
    ``disable_tqdm``) for :class:`CompactProgressCallback`; with ``disable_tqdm``, or when stderr is not a
    terminal, no bar is drawn."""
    # Not a terminal (a log file, Slurm, CI): lines only. The step lines already show progress, and a bar held
    # open across the eval hooks' own bars would make tqdm nest them with cursor-movement escape codes.
    had_bar = any(isinstance(cb, ProgressCallback) for cb in trainer.callback_handler.callbacks) and sys.stderr.isatty()
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    callback = CompactProgressCallback()
    if not had_bar:  # disable_tqdm: lines only
        callback.on_train_begin = lambda *args, **kwargs: setattr(callback, "current_step", 0)  # type: ignore[method-assign]
        callback.on_step_end = lambda *args, **kwargs: None  # type: ignore[method-assign]
        callback.on_train_end = lambda *args, **kwargs: None  # type: ignore[method-assign]
    trainer.add_callback(callback)


def log_run_header(
    trainer: Any, script_args: ScriptArguments, model_args: VerituneModelConfig, data_summary: str
) -> None:
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
