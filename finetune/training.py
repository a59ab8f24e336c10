"""The run itself, shared by the entry scripts around TRL's trainers: model + processor + LoRA loading, the
callbacks (eval hooks, W&B run settings, provenance), then train and save with resumption.

Its parts live beside it: console output and logging (:mod:`finetune.console`), the model card and
``veritune_run.json`` (:mod:`finetune.model_card`), resumption and finished-run detection (:mod:`finetune.resume`)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainingArguments
from transformers.integrations import WandbCallback

from core.errors import UserError
from core.hub import require_model_source
from core.io import require_input_path
from core.lock import hold_lock
from core.registry import import_dotted
from core.run_layout import WANDB_RUN_FILE
from core.secrets import withhold_secrets
from core.trl_adapter import check_trl_version
from core.wandb_login import require_wandb_login
from finetune.configs import ScriptArguments, VerituneModelConfig, require_generation_runtime
from finetune.console import log_run_header, setup_logging, use_compact_progress
from finetune.console import use_cpu_accelerator_without_gpu as use_cpu_accelerator_without_gpu  # the demo's import
from finetune.model_card import RunConfigCallback, attach_model_card
from finetune.models import get_lora_config, get_model, get_processor
from finetune.resume import (
    AtLastStep,
    StopAtLastStep,
    last_logged_step,
    report_finished_run,
    resume_checkpoint,
    train_loss,
)
from finetune.run_dir import claim_run_dir, run_settings

logger = logging.getLogger("veritune")

DEFAULT_WANDB_PROJECT = "veritune"


def bind_callbacks(trainer: Any) -> None:
    """Give the callbacks that log through the Trainer (the eval hook) its callback handler, and the eval hook
    the trainer's vLLM generation (TRL's ``vllm_generation`` with ``use_vllm``) whose colocated engine it reuses."""
    generation = getattr(trainer, "vllm_generation", None) if getattr(trainer, "use_vllm", False) else None
    for callback in trainer.callback_handler.callbacks:
        if hasattr(callback, "bind_handler"):
            callback.bind_handler(trainer.callback_handler)
        if hasattr(callback, "bind_vllm"):
            callback.bind_vllm(generation)


def configure_wandb(script_args: ScriptArguments, training_args: TrainingArguments) -> None:
    """W&B run settings from the recipe (project, group, tags); files go under the run directory."""
    if "wandb" not in (training_args.report_to or []):
        return
    if script_args.wandb_group:
        os.environ.setdefault("WANDB_RUN_GROUP", script_args.wandb_group)
    if script_args.wandb_tags:
        os.environ.setdefault("WANDB_TAGS", ",".join(script_args.wandb_tags))
    # TrainingArguments.project (default "huggingface") is logged into the W&B config beside the real project:
    # make both the project the run really goes to.
    project = os.environ.get("WANDB_PROJECT") or script_args.wandb_project or DEFAULT_WANDB_PROJECT
    os.environ["WANDB_PROJECT"] = project
    if hasattr(training_args, "project"):
        training_args.project = project
    if not training_args.run_name:
        training_args.run_name = Path(training_args.output_dir).name
    os.environ.setdefault("WANDB_DIR", str(Path(training_args.output_dir).resolve()))
    Path(os.environ["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)


def get_model_and_processor(model_args: VerituneModelConfig, processor: Any | None = None) -> tuple[Any, Any, Any]:
    """The policy model, its processor (``processor`` when already loaded), and the LoRA config (None for
    full-parameter training)."""
    processor = get_processor(model_args) if processor is None else processor
    model = get_model(model_args)
    return model, processor, get_lora_config(model_args)


def get_callbacks(
    script_args: ScriptArguments, training_args: TrainingArguments, model_args: VerituneModelConfig | None = None
) -> list[TrainerCallback]:
    """Callbacks every entry script adds: W&B settings, the run's record (its settings, from ``model_args`` too),
    and, when enabled, the eval hooks."""
    settings = run_settings(script_args, training_args, model_args) if model_args is not None else None
    configure_wandb(script_args, training_args)
    callbacks: list[TrainerCallback] = [RunConfigCallback(script_args, settings)]
    hook = eval_hook(script_args)
    if hook is not None:
        callbacks.append(hook)
    return callbacks


def eval_hook(script_args: ScriptArguments) -> TrainerCallback | None:
    """The recipe's eval hook (``eval_on_save`` with ``eval_benchmarks``, or ``eval_final_benchmarks``), None
    when it has none; built from the recipe's eval plan (:meth:`eval_hooks.plan.EvalPlan.of`, parsed once)."""
    from eval_hooks.plan import EvalPlan

    plan = EvalPlan.of(script_args)
    if not plan.enabled:
        return None
    from eval_hooks.callback import EvalHookCallback

    return EvalHookCallback(plan)


# The data paths a recipe may name and what each must be: "dir", or "any" where the reader takes a file or a
# folder (finetune/data_sources.py; core/pope_format.py for replay_path; MIOH's loader for multi_image_path).
DATA_PATH_KEYS = {
    "dataset_path": "any",
    "eval_dataset_path": "any",
    "replay_path": "any",
    "image_root": "dir",
    "multi_image_path": "file",
    "multi_image_root": "dir",
}


def check_run_paths(script_args: ScriptArguments | None, model_args: VerituneModelConfig | None) -> None:
    """Check, before any model or DeepSpeed engine loads, that every path the recipe names exists as its reader
    expects: the training data (:data:`DATA_PATH_KEYS`), the model (a local-looking ``model_name_or_path`` must
    be a directory; a Hub id is left to the Hub, unless ``HF_HUB_OFFLINE`` is set and it is not cached:
    :func:`core.hub.require_model_source`) and, when the eval hook runs, its folders and every
    benchmark's files (:meth:`eval_hooks.callback.EvalHookCallback.check_data`). Paths are checked as the run
    reads them: relative to the current directory, after the recipe's own resolution
    (:func:`core.recipe_file.resolve_recipe_path`).

    Raises:
        UserError: ``"<key>: <path>: no such file"`` (or directory), one line.
    """
    if script_args is not None:
        for key, kind in DATA_PATH_KEYS.items():
            value = getattr(script_args, key, None)
            if value:
                require_input_path(key, value, kind)
    if model_args is not None:
        if not model_args.model_name_or_path:
            raise UserError("model_name_or_path: required (a Hub id or a local model directory)")
        require_model_source(
            model_args.model_name_or_path, "model_name_or_path", revision=model_args.model_revision, probe_hub=False
        )
    hook = eval_hook(script_args) if script_args is not None else None
    if hook is not None:
        hook.check_data()


def start_run(
    training_args: TrainingArguments,
    script_args: ScriptArguments | None = None,
    model_args: VerituneModelConfig | None = None,
) -> bool:
    """Take a Hub token off the settings into ``HF_TOKEN`` (:func:`core.secrets.withhold_secrets`); check the
    installed TRL (:func:`core.trl_adapter.check_trl_version`) and that every path the recipe
    names exists (:func:`check_run_paths`) and every plugin it lists imports (:func:`get_plugins`); set up
    logging; on the main process, hold ``output_dir``'s lock for the
    run's lifetime (:func:`core.lock.hold_lock`); check that ``output_dir`` holds no other run
    (:func:`finetune.run_dir.claim_run_dir`, given the script and model arguments); True, after saying so, when
    it already holds this run finished (the entry scripts then stop before loading a model).
    Then, for a run to train, that W&B can log where ``report_to`` names it, and where it resumes from
    (:func:`finetune.resume.resume_checkpoint`: the newest complete checkpoint of this run, with or without
    ``resume_from_checkpoint: auto``); a resumed run continues its W&B run (:func:`resume_wandb_run`).

    Raises:
        UserError: a TRL other than the one veritune's TRL adapter is written for, ``use_vllm: true`` where
            vLLM is not installed or no GPU is visible (:func:`finetune.configs.require_generation_runtime`), a
            missing data file, folder or local model (:func:`check_run_paths`), a plugin that does not import
            (:func:`get_plugins`), ``output_dir`` in use by another
            run, ``output_dir`` holding a run with other settings, ``report_to: wandb`` without W&B credentials
            (:func:`core.wandb_login.require_wandb_login`), or a ``resume_from_checkpoint`` that names no
            checkpoint, all before any model loads.
    """
    withhold_secrets(training_args, script_args, model_args)  # a Hub token: in HF_TOKEN, in no record of the run
    check_trl_version()
    require_generation_runtime(training_args)
    check_run_paths(script_args, model_args)
    get_plugins(script_args)
    setup_logging(training_args)
    if training_args.process_index == 0:  # the main process writes the run: it holds output_dir, before anything
        output_dir = training_args.output_dir
        hold_lock(output_dir, f"output_dir {output_dir}", "wait for that run to finish, or choose another output_dir")
    if script_args is not None and model_args is not None:
        claim_run_dir(script_args, training_args, model_args)
    if report_finished_run(training_args):
        return True
    require_wandb_login(training_args.report_to)
    logged = last_logged_step(training_args.output_dir)  # before resume_checkpoint cuts the train log back
    resume_checkpoint(training_args)  # resume this run, or start it over in one line (before anything is written)
    resume_wandb_run(training_args, logged)
    return False


# What :func:`resume_wandb_run` set for this process's run: the environment it gave wandb.init, and the last step
# the W&B run held already (the resumed run does not log those steps again: :class:`ResumedWandbCallback`).
_WANDB_RESUME: dict[str, Any] = {"env": [], "logged_until": 0}


def resume_wandb_run(training_args: TrainingArguments, logged_until: int) -> str | None:
    """Have a resumed run (``resume_from_checkpoint`` chosen by :func:`finetune.resume.resume_checkpoint`: a
    rerun, a Slurm requeue) that logs to W&B continue the W&B run ``RUN_DIR/wandb_run.json`` records: on the main
    process, ``WANDB_RUN_ID`` (the recorded id) and ``WANDB_RESUME=allow`` for the ``wandb.init`` of transformers'
    ``WandbCallback``; the steps up to ``logged_until`` (the last one the stopped run logged) are not logged again
    (:func:`skip_logged_wandb_steps`). A ``WANDB_RUN_ID`` set by the user is left as it is. Returns the id resumed,
    else None."""
    for key in _WANDB_RESUME["env"]:  # set for an earlier run of this process
        os.environ.pop(key, None)
    _WANDB_RESUME.update(env=[], logged_until=0)
    if (
        "wandb" not in (training_args.report_to or [])
        or not training_args.resume_from_checkpoint
        or training_args.process_index != 0
    ):
        return None
    try:
        run_id = json.loads((Path(training_args.output_dir) / WANDB_RUN_FILE).read_text(encoding="utf-8")).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(run_id, str) or not run_id or os.environ.get("WANDB_RUN_ID", run_id) != run_id:
        return None
    for key, value in (("WANDB_RUN_ID", run_id), ("WANDB_RESUME", "allow")):
        if key not in os.environ:
            os.environ[key] = value
            _WANDB_RESUME["env"].append(key)
    _WANDB_RESUME["logged_until"] = logged_until
    logger.info("continuing W&B run %s (it holds the steps up to %d)", run_id, logged_until)
    return run_id


class ResumedWandbCallback(WandbCallback):
    """transformers' ``WandbCallback`` for a resumed run: the steps up to ``logged_until``, which the W&B run
    holds from before the stop, are not logged again (their end-of-run summary values still are)."""

    # the keys WandbCallback.on_log writes to the run's summary rather than its history
    SUMMARY_KEYS = frozenset(
        {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos"}
    )

    def __init__(self, logged_until: int) -> None:
        super().__init__()
        self.logged_until = logged_until

    def on_log(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, logs: Any = None, **kwargs: Any
    ) -> None:
        if state.global_step > self.logged_until:
            super().on_log(args, state, control, model=model, logs=logs, **kwargs)
            return
        if not self._initialized:
            self.setup(args, state, model)
        if state.is_world_process_zero and self._wandb is not None and self._wandb.run is not None:
            for key in self.SUMMARY_KEYS.intersection(logs or {}):
                self._wandb.run.summary[key] = logs[key]


def skip_logged_wandb_steps(trainer: Any) -> bool:
    """Swap the trainer's ``WandbCallback`` for a :class:`ResumedWandbCallback`, in its place, when
    :func:`resume_wandb_run` continues a W&B run that holds steps already; True when it did."""
    logged_until = _WANDB_RESUME["logged_until"]
    callbacks = trainer.callback_handler.callbacks
    for index, callback in enumerate(callbacks):
        if logged_until and type(callback) is WandbCallback:
            callbacks[index] = ResumedWandbCallback(logged_until)
            return True
    return False


def train_with_hooks(
    trainer: Any,
    processor: Any,
    script_args: ScriptArguments,
    training_args: TrainingArguments,
    model_args: VerituneModelConfig,
    *,
    data_summary: str,
) -> None:
    """An entry script's last steps: bind the eval hook, apply the recipe's plugins (:func:`apply_plugins`), log the
    run header, attach the model card, then train and save (:func:`train_and_save`)."""
    bind_callbacks(trainer)  # the eval hook logs through the trainer's callback handler
    skip_logged_wandb_steps(trainer)
    apply_plugins(trainer, script_args)
    log_run_header(trainer, script_args, model_args, data_summary=data_summary)
    attach_model_card(trainer, script_args, model_args)
    train_and_save(trainer, processor, training_args)


def get_plugins(script_args: ScriptArguments | None) -> list[Callable[[Any], Any]]:
    """The functions the recipe's ``plugins`` name by dotted path (docs/TRAINING.md, "Plugins"), imported.

    Raises:
        UserError: ``"plugins: <path>: ..."``, one line, for a path that does not import or is not callable.
    """
    plugins = []
    for name in getattr(script_args, "plugins", None) or []:
        try:
            plugin = import_dotted(name)
        except (ImportError, AttributeError) as err:
            raise UserError(f"plugins: {name}: cannot be imported ({err})") from None
        if not callable(plugin):
            raise UserError(f"plugins: {name}: not a function of the trainer")
        plugins.append(plugin)
    return plugins


def apply_plugins(trainer: Any, script_args: ScriptArguments) -> None:
    """Call each plugin of the recipe (:func:`get_plugins`) with the built trainer, in the recipe's order, before
    it trains."""
    for name, plugin in zip(script_args.plugins, get_plugins(script_args), strict=True):
        plugin(trainer)
        logger.info("plugin %s applied", name)


def train_and_save(trainer: Any, processor: Any, training_args: TrainingArguments) -> None:
    """Train (from the checkpoint :func:`start_run` chose, if any), then save weights, processor, trainer state
    and the train metrics (``train_results.json``: what marks the run finished), end the W&B run
    (:func:`finish_wandb_run`), leave the process group, and say, last, where the model was saved.

    A finished run never gets here (:func:`start_run` stops the entry script first); a run resumed from the
    checkpoint of its last step trains no further and saves that checkpoint's weights and history as the
    final ones, exactly as the uninterrupted run would have.
    """
    import time

    from transformers.trainer_utils import speed_metrics

    checkpoint = training_args.resume_from_checkpoint
    trainer.add_callback(StopAtLastStep())
    use_compact_progress(trainer)
    start = time.time()
    try:
        metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
    except AtLastStep:
        logger.info(
            "%s is the run's last step (%d): no further training; saving it as the final model",
            checkpoint,
            trainer.state.global_step,
        )
        metrics = speed_metrics("train", start, num_samples=0, num_steps=0)
        metrics.update(total_flos=trainer.state.total_flos, train_loss=train_loss(trainer.state.log_history))
        trainer.log(metrics)
        trainer.control = trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)
        trainer.is_in_train = False
    trainer.log_metrics("train", metrics)
    # the metrics last: a run killed while saving is not taken for finished (finetune.resume.finished_run)
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(training_args.output_dir)
    trainer.save_state()
    trainer.save_metrics("train", metrics)
    trainer.create_model_card()  # the final card: the last checkpoint's eval metrics included
    if training_args.push_to_hub:
        # TRL's own mechanism: Trainer.push_to_hub uploads output_dir (weights, processor, the card above)
        # to hub_model_id.
        url = trainer.push_to_hub(commit_message=f"veritune: {Path(training_args.output_dir).name}")
        logger.info("pushed to the Hub: %s", getattr(url, "commit_url", url))
    finish_wandb_run()
    # every process leaves the process group before exit: gloo's threads left to the interpreter's teardown can
    # abort a worker after its work is saved ("terminate called without an active exception")
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()
    logger.info("model saved to %s", training_args.output_dir)


def finish_wandb_run() -> None:
    """End this process's W&B run, if it has one, now rather than at exit: its closing lines ("Find logs at
    ...") come before the run's last line, which says where the model was saved."""
    wandb = sys.modules.get("wandb")  # not imported: no run to finish
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
