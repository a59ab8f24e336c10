"""What a run was made from, written beside its weights: the model card (``OUTPUT_DIR/README.md``, written
by TRL's own hook with each checkpoint and by ``push_to_hub``; veritune fills in what it knows) and
``OUTPUT_DIR/veritune_run.json`` (script settings, recipe, dataset manifest; also in the W&B run config).
Both name the dataset's manifest found by :func:`core.io.dataset_manifest`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainingArguments

from core.io import atomic_write_json, atomic_write_text, dataset_manifest, sha256_file
from core.recipe_file import load_recipe_file, read_recipe
from core.run_layout import WANDB_RUN_FILE
from core.secrets import redact_secrets
from finetune.configs import ScriptArguments, VerituneModelConfig
from finetune.run_dir import PROVENANCE_FILE, SETTINGS_KEY


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
        *_card_quick_start(trainer.args.hub_model_id or str(Path(trainer.args.output_dir).resolve())),
        *_card_training_data(script_args.dataset_path or script_args.dataset_name),
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
    trl_class = trl_trainer_class(type(trainer))
    method = trl_class.__name__.replace("Trainer", "")
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
        f"veritune ({method}: {_trainer_phrase(type(trainer), trl_class)}) to reduce hallucination.",
        "",
    ]


def trl_trainer_class(cls: type) -> type:
    """The TRL trainer class that ``cls`` is or subclasses (``GRPOTrainer``, ``DPOTrainer``, ...); ``cls``
    itself when none is."""
    return next((base for base in cls.__mro__ if base.__module__.split(".")[0] == "trl"), cls)


def _trainer_phrase(cls: type, trl_class: type) -> str:
    if cls is trl_class:
        return f"TRL's `{cls.__name__}`"
    return f"veritune's `{cls.__name__}`, a subclass of TRL's `{trl_class.__name__}`"


def _card_quick_start(repo: str) -> list[str]:
    """The card's image + text quick start, loading the model from ``repo`` (a Hub id once pushed, else the
    run's folder as an absolute path, which transformers reads as a local folder)."""
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
        f"| {sha256_file(manifest) if manifest else '-'} |",
        "",
    ]


def _card_evaluation(log_history: list[dict[str, Any]]) -> list[str]:
    """The card's table of the latest eval-hook metrics (nothing when the hooks logged none)."""
    step, metrics = latest_eval_metrics(log_history)
    if not metrics:
        return []
    # a benchmark scored on its answered items only (eval_allow_partial) is marked so
    entry = next(
        (row for row in reversed(log_history) if row.get("step") == step and any(k in row for k in metrics)), {}
    )
    partial = {key.split("/")[1] for key, value in entry.items() if key.endswith("/coverage/partial") and value}
    return [
        f"## Evaluation (eval hooks, step {step})",
        "",
        "| benchmark | metric | value |",
        "| --- | --- | --- |",
        *(
            f"| {key.split('/')[1]}{' (partial)' if key.split('/')[1] in partial else ''} | {key.split('/', 2)[2]} "
            f"| {value:.4g} |"
            for key, value in metrics.items()
        ),
        "",
    ]


def _card_recipe(recipe_path: str | None) -> list[str]:
    """The card's copy of the recipe file with its sha256, then of each base it includes (nothing when there
    is no recipe file)."""
    if not recipe_path or not Path(recipe_path).is_file():
        return []
    recipe, *bases = load_recipe_file(recipe_path).files
    lines = [
        "## Recipe",
        "",
        f"`{recipe_path}` (sha256 {sha256_file(recipe)[:12]}; command-line overrides are in "
        "`veritune_run.json` beside the weights):",
        "",
        "```yaml",
        recipe.read_text(encoding="utf-8").strip(),
        "```",
        "",
    ]
    for base in bases:
        lines += [
            f"`{base}`, included (sha256 {sha256_file(base)[:12]}):",
            "",
            "```yaml",
            base.read_text(encoding="utf-8").strip(),
            "```",
            "",
        ]
    return lines


def _card_wandb_run() -> list[str]:
    """The card's link to the W&B run of this process (nothing without one)."""
    try:
        import wandb

        run = wandb.run
        if run is not None:
            url = None if getattr(run, "offline", False) else run.url  # offline: none, and wandb warns at each ask
            return [f"Training curves: [W&B run]({url})" if url else f"W&B run id: {run.id}", ""]
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
    """What a run was made from: the script settings, the recipe's values (its includes merged) and the dataset's
    manifest (written by veritune's builders beside their output), when present; secrets redacted
    (:func:`core.secrets.redact_secrets`)."""
    provenance: dict[str, Any] = {"script_args": vars(script_args)}
    if script_args.recipe and Path(script_args.recipe).is_file():
        provenance["recipe"] = read_recipe(script_args.recipe)
    manifest = dataset_manifest(script_args.dataset_path)
    if manifest is not None:
        provenance["dataset_manifest"] = json.loads(manifest.read_text(encoding="utf-8"))
    return redact_secrets(provenance)


class RunConfigCallback(TrainerCallback):
    """Record the run's provenance and settings (:func:`finetune.run_dir.run_settings`, what a later run into
    the same directory is compared with) beside its checkpoints, in each checkpoint, and in the W&B run config."""

    def __init__(self, script_args: ScriptArguments, settings: dict[str, Any] | None = None) -> None:
        self.script_args = script_args
        self.settings = settings
        self.provenance: dict[str, Any] = {}

    def on_save(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and self.provenance and checkpoint.is_dir():
            atomic_write_json(checkpoint / PROVENANCE_FILE, self.provenance)  # a checkpoint carries its run's settings

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        provenance = {**run_provenance(self.script_args), "world_size": args.world_size}
        if self.settings is not None:
            provenance[SETTINGS_KEY] = self.settings
        self.provenance = provenance
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
