"""The eval runner: batched greedy generation through transformers, resumable predictions files.

Items are sorted by generation budget and prompt length so that a batch pads little; prompts are left
padded; several images per item are placed in one user turn; image-free items are batched apart.
Predictions are appended to ``predictions.jsonl`` (one ``{"id", "prediction"}`` per line, flushed per
batch), so an interrupted run resumes where it stopped. With several processes (``accelerate launch``),
items are split between them and the main process merges their files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from tqdm import tqdm

from eval_hooks.base import EvalItem
from veritune.errors import UserError

PREDICTIONS_FILE = "predictions.jsonl"


def read_predictions(path: Path) -> dict[str, str]:
    """``{id: prediction}`` from a predictions file; a torn last line (killed mid-write) is ignored."""
    predictions: dict[str, str] = {}
    if not path.is_file():
        return predictions
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict) or "id" not in record or "prediction" not in record:
                raise UserError(f"{path}, line {number}: expected {{\"id\": ..., \"prediction\": ...}}")
            predictions[str(record["id"])] = str(record["prediction"])
    return predictions


def drop_torn_tail(path: Path) -> None:
    """Cut a last line left half-written by a killed run, so appended records start on a fresh line."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def load_model(model_path: str | Path, dtype: str = "auto") -> tuple[Any, Any]:
    """Model and processor from a checkpoint directory or hub id (LoRA adapter directories too)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = Path(model_path)
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        if (path / "adapter_config.json").is_file():  # a LoRA run's output: merge into its base model
            from peft import PeftConfig, PeftModel

            base = PeftConfig.from_pretrained(path).base_model_name_or_path
            model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype)
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
        else:
            model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch_dtype)
        processor = AutoProcessor.from_pretrained(model_path, padding_side="left")
    except OSError as err:
        raise UserError(f"--model: cannot load {model_path} ({str(err).splitlines()[0]})") from None
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model.eval(), processor


def _batches(items: list[EvalItem], processor: Any, batch_size: int, sort_by_length: bool = True) -> Iterator[list[EvalItem]]:
    """Batches of equal budget and image count; sorted by prompt length so that little padding is needed
    (``sort_by_length=False`` keeps the file order, for the before/after benchmark)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    lengths = {item.id: len(tokenizer(item.prompt)["input_ids"]) for item in items} if sort_by_length else {}
    ordered = sorted(items, key=lambda it: (it.max_new_tokens, len(it.images), lengths.get(it.id, 0)))
    batch: list[EvalItem] = []
    for item in ordered:
        if batch and (len(batch) == batch_size or (item.max_new_tokens, len(item.images)) != (batch[0].max_new_tokens, len(batch[0].images))):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


@torch.no_grad()
def generate_batch(model: Any, processor: Any, batch: list[EvalItem]) -> list[str]:
    """Greedy answers to one batch of items (same budget, same number of images)."""
    texts, images = [], []
    for item in batch:
        content = [{"type": "image"} for _ in item.images] + [{"type": "text", "text": item.prompt}]
        texts.append(processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False))
        for path in item.images:
            with Image.open(path) as image:
                images.append(image.convert("RGB"))
    inputs = processor(text=texts, images=images or None, padding=True, return_tensors="pt").to(model.device)
    output = model.generate(**inputs, max_new_tokens=batch[0].max_new_tokens, do_sample=False)
    return processor.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def run_items(
    model: Any,
    processor: Any,
    items: list[EvalItem],
    predictions_path: Path,
    *,
    batch_size: int = 8,
    desc: str = "eval",
    sort_by_length: bool = True,
) -> dict[str, str]:
    """Generate answers for every item not yet in ``predictions_path``; return all predictions.

    Items with missing images are skipped (the scorer counts them, never as correct).
    """
    from accelerate import PartialState

    state = PartialState()
    processor.tokenizer.padding_side = "left"
    done = read_predictions(predictions_path)
    todo = [item for item in items if item.id not in done and not item.missing_images]
    shard_path = predictions_path
    if state.num_processes > 1:
        shard_path = predictions_path.with_name(f"{predictions_path.stem}.rank{state.process_index}.jsonl")
        done.update(read_predictions(shard_path))
        todo = [item for item in todo if item.id not in done]
    predictions_path.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_tail(shard_path)
    with state.split_between_processes(todo) as mine, shard_path.open("a", encoding="utf-8") as handle:
        bar = tqdm(total=len(mine), desc=desc, unit="item", disable=not state.is_main_process)
        for batch in _batches(list(mine), processor, batch_size, sort_by_length):
            answers = generate_batch(model, processor, batch)
            for item, answer in zip(batch, answers):
                handle.write(json.dumps({"id": item.id, "prediction": answer}, ensure_ascii=False) + "\n")
                done[item.id] = answer
            handle.flush()
            bar.update(len(batch))
        bar.close()
    if state.num_processes > 1:
        state.wait_for_everyone()
        if state.is_main_process:
            merged = read_predictions(predictions_path)
            for rank in range(state.num_processes):
                part = predictions_path.with_name(f"{predictions_path.stem}.rank{rank}.jsonl")
                merged.update(read_predictions(part))
            with predictions_path.open("w", encoding="utf-8") as handle:
                for key, value in merged.items():
                    handle.write(json.dumps({"id": key, "prediction": value}, ensure_ascii=False) + "\n")
            for rank in range(state.num_processes):
                predictions_path.with_name(f"{predictions_path.stem}.rank{rank}.jsonl").unlink(missing_ok=True)
        state.wait_for_everyone()
        done = read_predictions(predictions_path)
    return done
