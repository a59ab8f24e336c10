"""A run directory belongs to one run: the settings a run is made of, recorded in ``veritune_run.json``, and
the check, before anything loads, that an ``output_dir`` holding a run holds *this* run.

What counts as the run's settings (:func:`run_settings`): every recipe key and command-line override of the
entry script's three dataclasses, except the ones that change nothing the run computes
(:data:`NOT_RUN_SETTINGS` and :data:`NOT_RUN_PREFIXES`: where it is written, logging and tracking, the eval
hooks, when checkpoints are saved, the Hub push, data-loader workers, whether to resume), plus the content of
the training data (its manifest's SHA-256, or the file's own for a file without one) and of a local model
(a fingerprint of its files). The same settings resume or report the finished run (:mod:`finetune.resume`);
other settings are refused. ``overwrite_output_dir: true`` (a veritune key: transformers 5 dropped
``TrainingArguments``'s own; transformers' example scripts used it to train from scratch) clears a directory
holding a run, this one or another, and starts over. docs/ARCHITECTURE.md, "Run directories", states the rule.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import shutil
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import dataset_manifest, sha256_file
from core.ownership import check_not_protected
from core.run_layout import TRAINER_STATE_FILE, WEIGHT_FILES, checkpoints
from core.secrets import redact_secrets
from eval_hooks.plan import SCRIPT_KEYS as EVAL_PLAN_KEYS

logger = logging.getLogger("veritune")

PROVENANCE_FILE = "veritune_run.json"  # the run's record: its settings (compared here) and provenance
SETTINGS_KEY = "settings"

# Keys that change nothing the run computes: the comparison leaves them out.
NOT_RUN_SETTINGS = frozenset(
    {
        # where and whether: the directory itself, the recipe's file name (its values are compared), resuming
        "output_dir",
        "overwrite_output_dir",
        "resume_from_checkpoint",
        "recipe",
        "accelerate_config",  # the process layout: the per-device batch and accumulation it gives are compared
        "local_rank",
        "do_train",
        "do_eval",
        "do_predict",
        # logging and tracking
        "report_to",
        "run_name",
        "project",
        "log_level",
        "log_level_replica",
        "log_on_each_node",
        "disable_tqdm",
        "include_num_input_tokens_seen",
        "skip_memory_metrics",
        "log_completions",
        "log_multimodal",
        "num_completions_to_print",
        "log_unique_prompts",
        "log_completions_hub_repo",
        "push_to_hub",
        "enable_jit_checkpoint",
        "restore_callback_states_from_checkpoint",
        "ddp_timeout",
        # the eval hooks (veritune: their keys, from their one home) and the Trainer's own evaluation: they read
        # the model, never change it
        *EVAL_PLAN_KEYS,
        "eval_strategy",
        "eval_steps",
        "eval_delay",
        "eval_on_start",
        "eval_do_concat_batches",
        "eval_use_gather_object",
        "eval_accumulation_steps",
        "per_device_eval_batch_size",
        "prediction_loss_only",
        "include_for_metrics",
        "batch_eval_metrics",
        "bf16_full_eval",
        "fp16_full_eval",
        "num_generations_eval",
        # data-loader workers: the same batches, fetched by other processes
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "dataloader_multiprocessing_context",
        # a frozen tower's features computed once per image: the same features, so the same run
        "vision_feature_cache",
    }
)
NOT_RUN_PREFIXES = ("logging_", "save_", "hub_", "trackio_", "wandb_", "vllm_server_")


def counts_as_setting(key: str) -> bool:
    """Whether a dataclass key changes the run (see the module docstring)."""
    return key not in NOT_RUN_SETTINGS and not key.startswith(NOT_RUN_PREFIXES)


def _plain(value: Any) -> Any:
    """A JSON value for a setting (enums by value, config objects by their text)."""
    if isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, default=str))


def _file_fingerprint(path: Path, digest: Any) -> None:
    """A file's size, and its whole content up to 2 MiB, else its first and last MiB."""
    size = path.stat().st_size
    digest.update(f"{path.name}:{size}".encode())
    with path.open("rb") as handle:
        if size <= 2 << 20:
            digest.update(handle.read())
        else:
            digest.update(handle.read(1 << 20))
            handle.seek(size - (1 << 20))
            digest.update(handle.read())


def model_fingerprint(model: str | None) -> str | None:
    """What identifies a local model directory's content cheaply (every file's size; small files, such as the
    configs and the tokenizer, whole; the ends of the weights); None for a Hub id (its name and revision are
    settings)."""
    if not model or not Path(model).is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(Path(model).iterdir()):
        if path.is_file():
            _file_fingerprint(path, digest)
    return digest.hexdigest()[:16]


def data_fingerprint(dataset_path: str | None) -> str | None:
    """The training data's content: its manifest's SHA-256 (a veritune build), else a file's own; None for a
    directory without a manifest (its path is a setting)."""
    manifest = dataset_manifest(dataset_path)
    if manifest is not None:
        return f"manifest sha256:{sha256_file(manifest)}"
    if dataset_path and Path(dataset_path).is_file():
        return f"sha256:{sha256_file(dataset_path)}"
    return None


def run_settings(script_args: Any, training_args: Any, model_args: Any) -> dict[str, Any]:
    """The settings that make the run (see the module docstring), flat and JSON-plain, with the contents of its
    data (``data``) and local model (``model``); secrets redacted (:func:`core.secrets.redact_secrets`)."""
    settings: dict[str, Any] = {}
    for instance in (script_args, training_args, model_args):
        for field in fields(instance):
            if field.init and counts_as_setting(field.name):
                settings[field.name] = _plain(getattr(instance, field.name))
    settings["data"] = data_fingerprint(getattr(script_args, "dataset_path", None))
    settings["model"] = model_fingerprint(getattr(model_args, "model_name_or_path", None))
    return redact_secrets(dict(sorted(settings.items())))


def _read_settings(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    settings = record.get(SETTINGS_KEY) if isinstance(record, dict) else None
    return settings if isinstance(settings, dict) else None


def recorded_settings(output_dir: str | Path) -> dict[str, Any] | None:
    """The settings of the run ``output_dir`` holds: its ``veritune_run.json``, else the newest checkpoint's
    (a directory that kept only its checkpoints); None when neither records any."""
    output_dir = Path(output_dir)
    for record in [output_dir / PROVENANCE_FILE, *(p / PROVENANCE_FILE for _, p in reversed(checkpoints(output_dir)))]:
        settings = _read_settings(record)
        if settings is not None:
            return settings
    return None


def holds_run(output_dir: str | Path) -> bool:
    """Whether ``output_dir`` holds (part of) a training run: a run record, a checkpoint, a final trainer state
    or weights."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return False
    names = (PROVENANCE_FILE, TRAINER_STATE_FILE, "train_results.json", *WEIGHT_FILES)
    return any((output_dir / name).exists() for name in names) or bool(checkpoints(output_dir))


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def settings_difference(previous: dict[str, Any], current: dict[str, Any], shown: int = 4) -> str:
    """``"learning_rate: 0.0001 -> 5e-05, max_steps: 2 -> 1"``: the keys whose values differ (the first
    ``shown``, then how many more); empty when none do."""
    changed = [key for key in sorted(set(previous) | set(current)) if previous.get(key) != current.get(key)]
    parts = [f"{key}: {_show(previous.get(key))} -> {_show(current.get(key))}" for key in changed[:shown]]
    if len(changed) > shown:
        parts.append(f"and {len(changed) - shown} more")
    return ", ".join(parts)


def clear_run_dir(output_dir: Path) -> None:
    """Remove everything in ``output_dir`` (``overwrite_output_dir: true`` on a directory holding a run)."""
    for child in output_dir.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def claim_run_dir(script_args: Any, training_args: Any, model_args: Any) -> None:
    """Check, before anything loads, that ``output_dir`` holds no run or this run (its recorded settings equal
    :func:`run_settings`: a rerun resumes it, :mod:`finetune.resume`); with ``overwrite_output_dir: true`` a
    directory holding a run, this one or another, is cleared (by the main process, before the others go on) and
    the run starts over.

    A directory holding training outputs without a veritune run's settings (no ``veritune_run.json``, in it or
    in a checkpoint) is not this run: refused, untouched, unless ``overwrite_output_dir``; the folders
    :mod:`core.ownership` protects are never cleared.

    Raises:
        UserError: one line naming the settings that differ and the ways on; outputs of no recorded run;
            ``overwrite_output_dir`` with a ``resume_from_checkpoint`` inside the directory it would clear, or on
            a protected folder.
    """
    output_dir = Path(training_args.output_dir)
    if getattr(script_args, "overwrite_output_dir", False):
        resume = training_args.resume_from_checkpoint
        if resume not in (None, "auto") and Path(resume).resolve().is_relative_to(output_dir.resolve()):
            raise UserError(
                f"overwrite_output_dir: true clears {output_dir}, which holds resume_from_checkpoint {resume}; drop "
                "one of the two"
            )
        if holds_run(output_dir):
            check_not_protected(output_dir, "output_dir")
        # every process waits here while the main one clears the directory (none may read it half-cleared)
        with training_args.main_process_first(desc="clearing output_dir", local=False):
            if training_args.process_index == 0 and holds_run(output_dir):
                if recorded_settings(output_dir) is None:
                    difference = "outputs no veritune run recorded"
                else:
                    difference = _difference_from_recorded(output_dir, script_args, training_args, model_args)
                logger.warning(
                    "overwrite_output_dir: removing the earlier run in %s (%s); starting over",
                    output_dir,
                    difference or "the same settings",
                )
                clear_run_dir(output_dir)
        return
    if holds_run(output_dir) and recorded_settings(output_dir) is None:
        raise UserError(
            f"output_dir {output_dir}: holds training outputs but no {PROVENANCE_FILE} of a veritune run, so not "
            "this run; choose another output_dir, or add --overwrite_output_dir true to replace them"
        )
    difference = _difference_from_recorded(output_dir, script_args, training_args, model_args)
    if difference:
        raise UserError(
            f"output_dir {output_dir}: holds a run with other settings ({difference}); choose another output_dir, "
            "rerun with that run's settings to resume it, or add --overwrite_output_dir true to replace it"
        )


def _difference_from_recorded(output_dir: Path, script_args: Any, training_args: Any, model_args: Any) -> str:
    """How this run's settings differ from the run ``output_dir`` holds; empty when it holds none or this one."""
    if not holds_run(output_dir):
        return ""
    previous = recorded_settings(output_dir)
    if previous is None:  # not a veritune run: claim_run_dir refuses it
        return ""
    current = run_settings(script_args, training_args, model_args)
    # a key an older veritune did not record yet, left at its default here, is the run the older one made
    defaults = setting_defaults(script_args, training_args, model_args)
    for key in set(current) - set(previous):
        if key in defaults and current[key] == defaults[key]:
            previous[key] = current[key]
    return settings_difference(previous, current)


def setting_defaults(*instances: Any) -> dict[str, Any]:
    """Each setting's default value (JSON-plain) for the dataclass instances ``run_settings`` reads."""
    defaults: dict[str, Any] = {}
    for instance in instances:
        for field in fields(instance):
            if field.default is not MISSING:
                defaults[field.name] = _plain(field.default)
            elif field.default_factory is not MISSING:
                defaults[field.name] = _plain(field.default_factory())
    return defaults
