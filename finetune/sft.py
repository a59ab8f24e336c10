"""Supervised fine-tuning on a prompt-completion table: the miniature's warm-start, its "conventionally trained" base.

    accelerate launch --config_file recipes/accelerate/single.yaml finetune/sft.py \
        recipes/miniature/tiny_sft_warmstart.yaml

The data are rows in TRL's conversational prompt-completion layout (``prompt``, ``completion``: lists of
``{"role", "content"}`` messages; ``images``: a list of paths under ``image_root`` or embedded ``datasets.Image``
features) as JSON lines, a JSON list, parquet, a ``save_to_disk`` folder or a Hub dataset (``dataset_name``;
:mod:`finetune.data_sources`). The miniature's warm-start table (POPE-random-style yes/no questions about a
synthetic world's train split, and FINER-worded attribute pairs) is built by ``veritune build warmstart-data``
(:mod:`miniature.warmstart_data`); a COCO instances file given as ``dataset_path`` is refused with that command.

Training is TRL's ``SFTTrainer`` on prompt-completion conversations (loss on the completion only); with
``max_train_samples``, on the seeded uniform subsample every trainer draws (``core.sampling.sample_indices``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, List, Value
from datasets import Image as ImageFeature
from trl import SFTTrainer

from core.errors import UserError
from core.sampling import sample_indices
from finetune.configs import ScriptArguments, VerituneModelConfig, VerituneSFTConfig
from finetune.data_sources import embedded_image_dir, iter_records, resolve_image, source_label
from finetune.recipe import run_entry_script
from finetune.training import get_callbacks, get_model_and_processor, start_run, train_with_hooks


@dataclass
class SFTScriptArguments(ScriptArguments):
    """The SFT run's data: a prompt-completion table (``dataset_path`` or ``dataset_name``; module doc)."""


def refuse_annotation_file(script_args: ScriptArguments) -> None:
    """Refuse a COCO instances file as ``dataset_path`` (the warm-start's data before they were a table), in one
    line naming the command that makes the table."""
    path = Path(script_args.dataset_path or "")
    if script_args.dataset_name or path.suffix != ".json" or not path.is_file():
        return
    with path.open("rb") as handle:
        if not handle.read(1 << 12).lstrip().startswith(b"{"):
            return
    try:
        data = json.loads(path.read_bytes())
    except ValueError:  # JSON lines (or not JSON: the reader names the line)
        return
    if isinstance(data, dict) and {"images", "annotations", "categories"} & data.keys():
        raise UserError(
            f"dataset_path: {path} is a COCO instances file, not a table of examples; build one with `veritune build "
            f"warmstart-data --annotations {path} --image-root IMAGES --out TABLE.jsonl` and give TABLE.jsonl as "
            "dataset_path, IMAGES as image_root"
        )


def _messages(value: Any, where: str, key: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    ):
        raise UserError(f"{where}: '{key}' must be a list of {{role, content}} messages with text content")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def table_examples(script_args: ScriptArguments) -> list[dict[str, Any]]:
    """Prompt-completion examples read from a table (module doc); every error names the row and the key."""
    root = Path(script_args.image_root or ".")
    extract = embedded_image_dir(script_args.dataset_path, script_args.dataset_name)
    examples = []
    records = iter_records(
        script_args.dataset_path,
        name=script_args.dataset_name,
        config=script_args.dataset_config,
        split=script_args.dataset_train_split,
    )
    for where, record in records:
        if not isinstance(record, dict):
            raise UserError(f"{where}: expected an object with prompt, completion and images")
        missing = [key for key in ("prompt", "completion", "images") if key not in record]
        if missing:
            raise UserError(f"{where}: missing key '{missing[0]}' (SFT rows hold prompt, completion and images)")
        images = record["images"] if isinstance(record["images"], list) else [record["images"]]
        paths = []
        for reference in images:
            found, looked_for = resolve_image(reference, root, extract)
            if found is None:
                raise UserError(f"{where}: image not found: {looked_for} (check image_root)")
            paths.append(found)
        examples.append(
            {
                "prompt": _messages(record["prompt"], where, "prompt"),
                "completion": _messages(record["completion"], where, "completion"),
                "images": paths,
            }
        )
    if not examples:
        raise UserError(f"{source_label(script_args.dataset_path, script_args.dataset_name, None, 'train')}: no rows")
    return examples


def sft_examples(script_args: ScriptArguments, seed: int) -> list[dict[str, Any]]:
    """The run's examples: the table's rows (:func:`table_examples`), in its order, then, with
    ``max_train_samples``, the seeded uniform subsample every trainer draws (``sample_indices``)."""
    examples = table_examples(script_args)
    if script_args.max_train_samples:
        examples = [examples[i] for i in sample_indices(len(examples), script_args.max_train_samples, seed)]
    return examples


def examples_dataset(examples: list[dict[str, Any]]) -> Dataset:
    """The examples as a ``datasets.Dataset`` whose images are file paths, decoded to RGB when a batch is
    collated (in the data-loader workers): the rows hold no pixels, so nothing is re-encoded up front and an
    image shared by several questions is stored once on disk, not once per row."""
    message = List({"role": Value("string"), "content": Value("string")})
    features = Features({"prompt": message, "completion": message, "images": List(ImageFeature(mode="RGB"))})
    return Dataset.from_list(examples, features=features)


class PositionIdsCollator:
    """A collator that adds the M-RoPE ``position_ids`` to each batch of ``collator``.

    Qwen-VL-style models compute these 3-D position ids from the token ids and image grids in every forward
    (``compute_3d_position_ids``), in Python, on the training process. Here the same method of the same model
    computes them while the batch is collated, in the data-loader workers, and the forward uses them as given:
    the same ids, so the same training, with less work on the process that trains.
    """

    def __init__(self, collator: Callable[[list[dict[str, Any]]], dict[str, Any]], compute: Callable[..., Any]) -> None:
        self.collator = collator
        self.compute = compute
        self._accepts = set(inspect.signature(compute).parameters)

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(examples)
        kwargs = {"inputs_embeds": None, "past_key_values": None, "video_grid_thw": None}
        kwargs.update({k: v for k, v in batch.items() if k in self._accepts and k != "position_ids"})
        position_ids = self.compute(**{k: v for k, v in kwargs.items() if k in self._accepts})
        if position_ids is not None:
            batch["position_ids"] = position_ids
        return batch


def with_position_ids(collator: Any, model: Any) -> Any:
    """``collator`` wrapped in :class:`PositionIdsCollator` when ``model`` computes M-RoPE position ids
    itself (the Qwen-VL family and its kin), else ``collator`` unchanged."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    compute = getattr(inner, "compute_3d_position_ids", None)
    if compute is None or "input_ids" not in inspect.signature(compute).parameters:
        return collator
    return PositionIdsCollator(collator, compute)


def main(script_args: SFTScriptArguments, training_args: VerituneSFTConfig, model_args: VerituneModelConfig) -> None:
    refuse_annotation_file(script_args)  # before the run directory is claimed
    if start_run(training_args, script_args, model_args):  # a finished run is not trained again
        return

    if not script_args.dataset_path and not script_args.dataset_name:
        raise UserError(
            "dataset_path: required (prompt-completion rows, e.g. the table of `veritune build warmstart-data`), "
            "or dataset_name (a Hub dataset of prompt-completion rows)"
        )

    # ---- Model and processor
    model, processor, peft_config = get_model_and_processor(model_args)

    # ---- Data
    examples = sft_examples(script_args, training_args.seed)
    source = source_label(
        script_args.dataset_path, script_args.dataset_name, script_args.dataset_config, script_args.dataset_train_split
    )
    summary = f"{len(examples)} examples from {source}"

    # ---- Train
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=examples_dataset(examples),
        processing_class=processor,
        peft_config=peft_config,
        callbacks=get_callbacks(script_args, training_args, model_args),
    )
    trainer.data_collator = with_position_ids(trainer.data_collator, trainer.model)
    train_with_hooks(trainer, processor, script_args, training_args, model_args, data_summary=summary)


if __name__ == "__main__":
    run_entry_script(main, (SFTScriptArguments, VerituneSFTConfig, VerituneModelConfig))
