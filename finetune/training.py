"""What the entry scripts share around TRL's trainers: logging, model + processor + LoRA loading,
callbacks (eval hooks, W&B run settings) and checkpoint resumption."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import transformers
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from finetune.configs import ScriptArguments, VerituneModelConfig, require_generation_runtime
from finetune.models import count_parameters, get_lora_config, get_model, get_processor
from veritune.core.errors import UserError
from veritune.core.io import atomic_write_json, atomic_write_text, read_yaml
from veritune.core.run_layout import WANDB_RUN_FILE, WEIGHT_FILES, is_complete_checkpoint
from veritune.core.run_layout import checkpoints as run_checkpoints

logger = logging.getLogger("veritune")

DEFAULT_WANDB_PROJECT = "veritune"
PROVENANCE_FILE = "veritune_run.json"


def setup_logging(training_args: TrainingArguments) -> None:
    """INFO logs on the main process only, in the format transformers uses."""
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level, force=True)
    transformers.utils.logging.set_verbosity(level if level == logging.WARNING else logging.WARNING)
    use_cpu_accelerator_without_gpu()


def use_cpu_accelerator_without_gpu() -> None:
    """DeepSpeed warns on import, once per process, that it "was unable to detect" an accelerator when there
    is none; on a CPU-only machine say so up front (``DS_ACCELERATOR=cpu``), which is what it falls back to."""
    if "DS_ACCELERATOR" not in os.environ and "deepspeed" not in sys.modules:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"


# ---- console output: one compact line per logging step (the full dict goes to TRAIN_LOG_FILE and W&B)

TRAIN_LOG_FILE = "train_log.jsonl"
# (key in TRL's logs, label on the console), in the order shown; `rewards/<name>/mean` are added after `reward`.
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
    ("dynamic_sampling/rounds", "rounds"),
    ("dynamic_sampling/prompts_drawn", "drawn"),
    ("completions/mean_length", "len"),
    ("grad_norm", "grad"),
    ("learning_rate", "lr"),
]


def compact_log_line(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """One short console line for a trainer log dict, or None for logs that are not per-step training logs
    (the eval hooks' metrics print their own line once per checkpoint)."""
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
        if isinstance(value, (int, float)):
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
        line = compact_log_line(logs, state.global_step, state.max_steps)
        if line is None:
            return
        if self.training_bar is not None:
            self.training_bar.write(line)
        else:
            print(line, flush=True)


def bind_callbacks(trainer: Any) -> None:
    """Give the callbacks that log through the Trainer (the eval hook) its callback handler, and the eval hook
    the trainer's vLLM generation (TRL's ``vllm_generation`` with ``use_vllm``) whose colocated engine it reuses."""
    generation = getattr(trainer, "vllm_generation", None) if getattr(trainer, "use_vllm", False) else None
    for callback in trainer.callback_handler.callbacks:
        if hasattr(callback, "bind_handler"):
            callback.bind_handler(trainer.callback_handler)
        if hasattr(callback, "bind_vllm"):
            callback.bind_vllm(generation)


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


def get_model_and_processor(model_args: VerituneModelConfig) -> tuple[Any, Any, Any]:
    """The policy model, its processor, and the LoRA config (None for full-parameter training)."""
    processor = get_processor(model_args)
    model = get_model(model_args)
    return model, processor, get_lora_config(model_args)


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


# ---- model card: written by TRL with each checkpoint (and by push_to_hub); veritune fills in what it knows


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def dataset_manifest(dataset_path: str | None) -> Path | None:
    """The ``manifest.json`` a veritune builder wrote beside (or inside) the training data, when there is one."""
    if not dataset_path:
        return None
    dataset = Path(dataset_path)
    for manifest in (
        (dataset if dataset.is_dir() else dataset.parent) / "manifest.json",
        dataset.with_suffix(".manifest.json"),
    ):
        if manifest.is_file():
            return manifest
    return None


def _is_headline(metric: str) -> bool:
    """The metrics ``eval run`` prints too: top-level ones and macro averages (not per class or subset)."""
    return "/" not in metric or metric.startswith("macro/")


def latest_eval_metrics(log_history: list[dict[str, Any]]) -> tuple[int | None, dict[str, float]]:
    """The step and headline metrics (``eval/<benchmark>/<metric>``) of the newest eval-hook entry."""
    for entry in reversed(log_history):
        metrics = {
            k: v
            for k, v in entry.items()
            if k.startswith("eval/") and isinstance(v, (int, float)) and _is_headline(k.split("/", 2)[-1])
        }
        if metrics:
            return entry.get("step"), metrics
    return None, {}


def model_card_text(
    trainer: Any, script_args: ScriptArguments, model_args: VerituneModelConfig, model_name: str
) -> str:
    """The model card (Hub ``README.md``): base model, training data with their manifests' sha256, the
    recipe, the latest eval-hook metrics and an image + text quick start."""
    lines = [
        *_card_header(trainer, model_args, model_name),
        *_card_quick_start(trainer.args.hub_model_id or model_name),
        *_card_training_data(script_args.dataset_path),
        *_card_evaluation(trainer.state.log_history),
        *_card_recipe(script_args.recipe),
        *_card_wandb_run(),
        "## Framework versions",
        "",
        *(f"- {name}: {_version(name)}" for name in ("veritune", "trl", "transformers", "torch")),
        "",
    ]
    return "\n".join(lines)


def _card_header(trainer: Any, model_args: VerituneModelConfig, model_name: str) -> list[str]:
    """The card's YAML metadata, title and one-line description (base model, method, TRL trainer)."""
    import yaml

    base = str(model_args.model_name_or_path)
    hub_base = base if base and not Path(base).exists() else None  # a local directory is no Hub reference
    method = type(trainer).__name__.replace("Trainer", "")
    metadata = {
        "base_model": hub_base,
        "library_name": "transformers",
        "pipeline_tag": "image-text-to-text",
        "tags": ["veritune", "trl", method.lower(), "hallucination", "generated_from_trainer"],
        "model_name": model_name,
    }
    return [
        "---",
        yaml.safe_dump({k: v for k, v in metadata.items() if v is not None}, sort_keys=False).strip(),
        "---",
        "",
        f"# {model_name}",
        "",
        "A fine-tuned version of "
        f"{f'[{hub_base}](https://huggingface.co/{hub_base})' if hub_base else f'`{base}`'}, trained with "
        f"veritune ({method} through TRL's `{type(trainer).__name__}`) to reduce hallucination.",
        "",
    ]


def _card_quick_start(repo: str) -> list[str]:
    """The card's image + text quick start, loading the model from ``repo``."""
    return [
        "## Quick start",
        "",
        "```python",
        "from transformers import AutoModelForImageTextToText, AutoProcessor",
        "",
        f'model = AutoModelForImageTextToText.from_pretrained("{repo}")',
        f'processor = AutoProcessor.from_pretrained("{repo}")',
        'messages = [{"role": "user", "content": [{"type": "image", "url": "photo.jpg"},',
        '                                         {"type": "text", "text": "Is there a dog in the image?"}]}]',
        "inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,",
        '                                       return_tensors="pt").to(model.device)',
        "output = model.generate(**inputs, max_new_tokens=256)",
        'print(processor.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
        "```",
        "",
    ]


def _card_training_data(dataset_path: str | None) -> list[str]:
    """The card's training-data table: the dataset and its manifest's sha256."""
    manifest = dataset_manifest(dataset_path)
    return [
        "## Training data",
        "",
        "| dataset | manifest | manifest sha256 |",
        "| --- | --- | --- |",
        f"| `{dataset_path}` | {f'`{manifest.name}`' if manifest else 'none'} "
        f"| {file_sha256(manifest) if manifest else '-'} |",
        "",
    ]


def _card_evaluation(log_history: list[dict[str, Any]]) -> list[str]:
    """The card's table of the latest eval-hook metrics (nothing when the hooks logged none)."""
    step, metrics = latest_eval_metrics(log_history)
    if not metrics:
        return []
    return [
        f"## Evaluation (eval hooks, step {step})",
        "",
        "| benchmark | metric | value |",
        "| --- | --- | --- |",
        *(f"| {key.split('/')[1]} | {key.split('/', 2)[2]} | {value:.4g} |" for key, value in metrics.items()),
        "",
    ]


def _card_recipe(recipe_path: str | None) -> list[str]:
    """The card's copy of the recipe file with its sha256 (nothing when there is no recipe file)."""
    if not recipe_path or not Path(recipe_path).is_file():
        return []
    recipe = Path(recipe_path)
    return [
        "## Recipe",
        "",
        f"`{recipe_path}` (sha256 {file_sha256(recipe)[:12]}; command-line overrides are in "
        "`veritune_run.json` beside the weights):",
        "",
        "```yaml",
        recipe.read_text(encoding="utf-8").strip(),
        "```",
        "",
    ]


def _card_wandb_run() -> list[str]:
    """The card's link to the W&B run of this process (nothing without one)."""
    try:
        import wandb

        if wandb.run is not None:
            return [
                f"Training curves: [W&B run]({wandb.run.url})" if wandb.run.url else f"W&B run id: {wandb.run.id}",
                "",
            ]
    except ImportError:
        pass
    return []


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def attach_model_card(trainer: Any, script_args: ScriptArguments, model_args: VerituneModelConfig) -> None:
    """Make TRL's own model-card hook (called with each checkpoint and by ``push_to_hub``) write veritune's
    card to ``OUTPUT_DIR/README.md``, so a pushed model carries it."""

    def create_model_card(
        model_name: str | None = None, dataset_name: str | None = None, tags: Any = None, **_: Any
    ) -> None:
        if not trainer.is_world_process_zero():
            return
        name = model_name or (trainer.args.hub_model_id or "").split("/")[-1] or Path(trainer.args.output_dir).name
        path = Path(trainer.args.output_dir) / "README.md"
        atomic_write_text(path, model_card_text(trainer, script_args, model_args, name))

    trainer.create_model_card = create_model_card


def run_provenance(script_args: ScriptArguments) -> dict[str, Any]:
    """What a run was made from: the script settings, the recipe file's contents and the dataset's
    manifest (written by veritune's builders beside their output), when present."""
    provenance: dict[str, Any] = {"script_args": vars(script_args)}
    if script_args.recipe and Path(script_args.recipe).is_file():
        provenance["recipe"] = read_yaml(script_args.recipe)
    if script_args.dataset_path:
        dataset = Path(script_args.dataset_path)
        # a directory build holds manifest.json; a file build has <file stem>.manifest.json beside it
        manifest = dataset / "manifest.json" if dataset.is_dir() else dataset.with_name(f"{dataset.stem}.manifest.json")
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
        provenance = {**run_provenance(self.script_args), "world_size": args.world_size}
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
                {
                    "id": wandb.run.id,
                    "project": wandb.run.project,
                    "entity": wandb.run.entity,
                    "group": wandb.run.group,
                },
            )


def get_callbacks(script_args: ScriptArguments, training_args: TrainingArguments) -> list[TrainerCallback]:
    """Callbacks every entry script adds: W&B settings and, when enabled, the eval hooks."""
    configure_wandb(script_args, training_args)
    callbacks: list[TrainerCallback] = [RunConfigCallback(script_args)]
    if (script_args.eval_on_save and script_args.eval_benchmarks) or script_args.eval_final_benchmarks:
        from eval_hooks.callback import EvalHookCallback
        from eval_hooks.evaluate import parse_benchmark_names, parse_data_overrides

        # The one parser of the CLI: comma-separated or listed names, NAME:LIMIT allowed; bad entries are refused.
        benchmarks = parse_benchmark_names(script_args.eval_benchmarks, "eval_benchmarks", allow_limits=True)
        data = {
            name: str(path)
            for name, path in parse_data_overrides(script_args.eval_data, "eval_data", benchmarks).items()
        }
        callbacks.append(
            EvalHookCallback(
                benchmarks if script_args.eval_on_save else [],
                script_args.eval_data_root,
                limit=script_args.eval_limit,
                batch_size=script_args.eval_batch_size,
                data=data,
                image_root=script_args.eval_image_root,
                final_benchmarks=script_args.eval_final_benchmarks,
                at_start=script_args.eval_at_start,
                backend=script_args.eval_backend,
            )
        )
    return callbacks


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``output_dir``; incomplete ones are skipped with a warning.

    Raises:
        UserError: checkpoints exist but none is complete.
    """
    output_dir = Path(output_dir)
    checkpoints = [path for _, path in reversed(run_checkpoints(output_dir))]
    for checkpoint in checkpoints:
        if is_complete_checkpoint(checkpoint):
            return checkpoint
        logger.warning(
            "skipping incomplete checkpoint %s (weights, trainer state or optimizer state missing)", checkpoint
        )
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
            logger.info(
                "resume_from_checkpoint: auto found no checkpoint in %s; starting fresh", training_args.output_dir
            )
            return None
        logger.info("resuming from %s", found)
        return str(found)
    if not Path(value).is_dir():
        raise UserError(f"resume_from_checkpoint: {value} is not a checkpoint directory")
    return value


class _AtLastStep(Exception):
    """Raised before a resumed run would step past its last step (its checkpoint already is the end)."""


class StopAtLastStep(TrainerCallback):
    """Stop a run resumed from the checkpoint of its last step before it takes a step past ``max_steps``.

    The Trainer only checks ``max_steps`` after a step, so a run resumed from ``checkpoint-<max_steps>``
    (killed between its last checkpoint and its final save) would otherwise train one step too many.
    """

    def on_step_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            raise _AtLastStep


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def finished_run(training_args: TrainingArguments) -> dict[str, Any] | None:
    """The final trainer state of ``output_dir`` when it already holds this run, finished: final weights,
    train metrics and a state at the last step (``max_steps``, or the same number of epochs); else None.
    Only a run asked to resume (``resume_from_checkpoint``) is recognised as finished."""
    if training_args.resume_from_checkpoint is None:
        return None
    output_dir = Path(training_args.output_dir)
    state = _read_state(output_dir)
    if (
        state is None
        or not (output_dir / "train_results.json").is_file()
        or not any((output_dir / n).exists() for n in WEIGHT_FILES)
    ):
        return None
    step, last = state.get("global_step", 0), state.get("max_steps", -1)
    if training_args.max_steps > 0:
        done = step >= training_args.max_steps
    else:
        done = step >= last > 0 and state.get("num_train_epochs") == training_args.num_train_epochs
    return state if done else None


def report_finished_run(training_args: TrainingArguments) -> bool:
    """True, after saying so, when ``output_dir`` already holds this run finished (entry scripts call this
    before loading a model: rerunning a finished run is a no-op)."""
    state = finished_run(training_args)
    if state is None:
        return False
    logger.warning(
        "%s already holds this run, finished at step %d of %d: nothing to do (choose another output_dir, or remove it, "
        "to train again)",
        training_args.output_dir,
        state["global_step"],
        state.get("max_steps", state["global_step"]),
    )
    return True


def _train_loss(log_history: list[dict[str, Any]]) -> float:
    """The mean loss over every step of the run, from its logged losses (each the mean of its interval)."""
    total, previous, last = 0.0, 0, 0
    for row in log_history:
        if "loss" in row and "step" in row:
            total += row["loss"] * (row["step"] - previous)
            previous = last = row["step"]
    return total / last if last else 0.0


def score_only_labelled_positions() -> None:
    """Make TRL's fused LM head score only the labelled positions on the CPU too.

    SFT, GRPO and DPO compute per-token log-probabilities through ``trl.trainer.utils.add_fused_lm_head``. On
    devices with Triton it projects only the positions whose label is not -100; elsewhere it projects every
    position of the batch and zeroes the unlabelled ones, so that a compiler (Neuron, XLA) sees one tile
    shape per sequence length. Eager CPU compiles nothing, and in a vision-language batch most positions are
    image and prompt tokens: the tiny warm-start spent a third of its step projecting them. The result is the
    same log-probabilities (the masked positions were zeroed anyway) up to float rounding. A TRL without the
    hook (``_use_triton`` moved or renamed) keeps its own behaviour.
    """
    import trl.trainer.utils as trl_utils

    has_triton = getattr(trl_utils, "_use_triton", None)
    if has_triton is None or getattr(has_triton, "veritune_cpu_compact", False):
        return

    def compact_on(device: Any) -> bool:
        return has_triton(device) or device.type == "cpu"

    compact_on.veritune_cpu_compact = True  # type: ignore[attr-defined]
    trl_utils._use_triton = compact_on


def start_run(training_args: TrainingArguments) -> bool:
    """Set up logging and TRL's LM head (:func:`score_only_labelled_positions`); True, after saying so, when
    ``output_dir`` already holds this run finished (the entry scripts then stop before loading a model).

    Raises:
        UserError: ``use_vllm: true`` where vLLM is not installed or no GPU is visible
            (:func:`finetune.configs.require_generation_runtime`), before any model loads.
    """
    require_generation_runtime(training_args)
    setup_logging(training_args)
    score_only_labelled_positions()
    return report_finished_run(training_args)


def train_with_hooks(
    trainer: Any,
    processor: Any,
    script_args: ScriptArguments,
    training_args: TrainingArguments,
    model_args: VerituneModelConfig,
    *,
    data_summary: str,
) -> None:
    """An entry script's last steps: bind the eval hook, log the run header, attach the model card, then
    train and save (:func:`train_and_save`)."""
    bind_callbacks(trainer)  # the eval hook logs through the trainer's callback handler
    log_run_header(trainer, script_args, model_args, data_summary=data_summary)
    attach_model_card(trainer, script_args, model_args)
    train_and_save(trainer, processor, training_args)


def train_and_save(trainer: Any, processor: Any, training_args: TrainingArguments) -> None:
    """Train (resuming as the recipe says), then save metrics, trainer state, weights and processor.

    A rerun of a finished run does nothing and says so; a run resumed from the checkpoint of its last
    step trains no further and saves that checkpoint's weights and history as the final ones, exactly as
    the uninterrupted run would have.
    """
    import time

    from transformers.trainer_utils import speed_metrics

    if report_finished_run(training_args):
        return
    checkpoint = resume_checkpoint(training_args)
    trainer.add_callback(StopAtLastStep())
    use_compact_progress(trainer)
    start = time.time()
    try:
        metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
    except _AtLastStep:
        logger.info(
            "%s is the run's last step (%d): no further training; saving it as the final model",
            checkpoint,
            trainer.state.global_step,
        )
        metrics = speed_metrics("train", start, num_samples=0, num_steps=0)
        metrics.update(total_flos=trainer.state.total_flos, train_loss=_train_loss(trainer.state.log_history))
        trainer.log(metrics)
        trainer.control = trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)
        trainer.is_in_train = False
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(training_args.output_dir)
    trainer.create_model_card()  # the final card: the last checkpoint's eval metrics included
    logger.info("model saved to %s", training_args.output_dir)
    if training_args.push_to_hub:
        # TRL's own mechanism: Trainer.push_to_hub uploads output_dir (weights, processor, the card above)
        # to hub_model_id.
        url = trainer.push_to_hub(commit_message=f"veritune: {Path(training_args.output_dir).name}")
        logger.info("pushed to the Hub: %s", getattr(url, "commit_url", url))
