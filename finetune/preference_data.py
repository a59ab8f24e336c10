"""Readers for preference data, returning TRL's conversational preference format.

Formats (``fmt="auto"`` picks one from the layout):

- ``veritune``: a ``veritune build finer`` directory (``train.jsonl`` / ``validation.jsonl`` + ``manifest.json``);
- ``finer``: the FINER-Tuning release, LLaMA-Factory's sharegpt DPO layout in JSON lines:
  ``{"conversations": [{"from": "human", "value": "<image>\\n..."}], "chosen": {"from": "gpt", "value": ...},
  "rejected": {...}, "images": [...], "meta": {"qa_type": "obj", "polarity": "pos", ...}}``;
- ``rlaif-v``: RLAIF-V rows ``{ds_name, image, question, chosen, rejected, origin_dataset, origin_split, idx,
  image_path}``, as JSON/JSON lines or the released parquet shards (a file or a directory of them), where
  ``image`` is ``{"bytes", "path"}``.

Any of these layouts may also come as a ``save_to_disk`` folder or a Hub dataset (``dataset_name``), read
by ``datasets`` like parquet (:mod:`finetune.data_sources`); images are paths under ``image_root`` or
embedded ``datasets.Image`` features.

Every reader returns rows with ``images`` (absolute paths), ``prompt`` (one user turn whose content starts
with one ``{"type": "image"}`` placeholder per image, then the text, as TRL's vision DPO expects),
``chosen`` and ``rejected`` (assistant turns), ``subset`` and ``polarity`` (``""`` when unknown).

Why paths and not images: an Arrow table cannot hold images that are opened only when a row is read, and
opening 160K images up front costs minutes and gigabytes. :func:`with_images` sets a transform that opens
them on access, which is what TRL's ``DPOTrainer`` sees; :func:`load_images` opens one row's list.

Rows whose chosen answer equals the rejected one are dropped and counted; rows whose images are missing
are listed, skipped and counted (:class:`PreferenceReport`).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import iter_jsonl, read_json
from finetune.data_sources import (
    embedded_image_dir,
    is_saved_dataset,
    iter_records,
    resolve_image,
    source_label,
    uses_datasets,
)

logger = logging.getLogger("veritune.finer")

_IMAGE_TOKEN = re.compile(r"\s*<image>\s*")
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass
class PreferenceReport:
    """How many rows were read and kept, what was dropped and why, and which images were missing."""

    total: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    missing_images: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.kept}/{self.total} preference rows kept; dropped: {dict(self.dropped) or 'none'}"


# ---- finding the records


def _is_veritune_dir(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").is_file() and (path / "train.jsonl").is_file()


def _iter_records(
    path: Path, split: str, name: str | None = None, config: str | None = None
) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for every record; ``where`` names the file and line or row for error messages.
    Hub datasets, ``save_to_disk`` folders and parquet are read by ``datasets`` (finetune.data_sources)."""
    if uses_datasets(path if not name else None, name):
        yield from iter_records(path, name=name, config=config, split=split, what="preference file")
        return
    if path.is_dir():
        if not _is_veritune_dir(path):
            raise UserError(
                f"{path}: not a `veritune build finer` directory (no manifest.json and train.jsonl) "
                "and holds no parquet files"
            )
        if split not in ("train", "validation"):
            raise UserError(f"split {split!r}: a veritune dataset directory has 'train' and 'validation'")
        for number, record in iter_jsonl(path / f"{split}.jsonl", what=f"{split} split"):
            yield f"{path / f'{split}.jsonl'}, line {number}", record
        return
    if not path.is_file():
        raise UserError(f"preference data not found: {path}")
    with path.open(encoding="utf-8") as handle:
        head = handle.read(1 << 12).lstrip()
    if head.startswith("["):
        data = read_json(path, what="preference file")
        for number, record in enumerate(data, start=1):
            yield f"{path}, record {number}", record
    else:
        for number, record in iter_jsonl(path, what="preference file"):
            yield f"{path}, line {number}", record


def detect_format(record: Any, where: str = "preference data") -> str:
    """The format of one record, from its fields."""
    if isinstance(record, dict):
        if "conversations" in record and "chosen" in record and "rejected" in record:
            return "finer"
        if "question" in record and "chosen" in record and "rejected" in record:
            return "rlaif-v"
        if "prompt" in record and "chosen" in record and "rejected" in record:
            return "veritune"
    raise UserError(
        f"{where}: unknown preference format; expected veritune (images, prompt, chosen, rejected), FINER-Tuning "
        "(conversations, chosen, rejected, images, meta) or RLAIF-V (image, question, chosen, rejected) fields"
    )


# ---- one record -> (image references, turns, chosen, rejected, subset, polarity)


def _text(value: Any) -> str:
    """The text of an answer: a string, a sharegpt turn, a chat message (string or typed parts), or a list of them."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "value" in value:
            return _text(value["value"])
        return _text(value.get("content", value.get("text", "")))
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and "role" in v for v in value):
            return _text(value[-1])
        return "".join(_text(v) for v in value if not (isinstance(v, dict) and v.get("type") == "image"))
    raise TypeError(f"cannot read text from {type(value).__name__}")


def _from_veritune(record: dict[str, Any]) -> tuple[list[Any], list[tuple[str, str]], str, str, str, str]:
    prompt = record["prompt"]
    turns = (
        [(m["role"], _text(m["content"])) for m in prompt] if isinstance(prompt, list) else [("user", _text(prompt))]
    )
    images = record.get("images") or ([record["image"]] if record.get("image") else [])
    return (
        images,
        turns,
        _text(record["chosen"]),
        _text(record["rejected"]),
        str(record.get("subset") or ""),
        str(record.get("polarity") or ""),
    )


def _from_finer(record: dict[str, Any]) -> tuple[list[Any], list[tuple[str, str]], str, str, str, str]:
    turns = []
    for turn in record["conversations"]:
        role = _ROLES.get(str(turn.get("from", turn.get("role", ""))).lower())
        if role is None:
            raise KeyError(f"conversations: unknown speaker {turn.get('from')!r}")
        turns.append((role, _text(turn)))
    meta = record.get("meta") or {}
    return (
        list(record.get("images") or []),
        turns,
        _text(record["chosen"]),
        _text(record["rejected"]),
        str(meta.get("qa_type") or ""),
        str(meta.get("polarity") or ""),
    )


def _from_rlaif(record: dict[str, Any]) -> tuple[list[Any], list[tuple[str, str]], str, str, str, str]:
    image = record.get("image")
    reference = {"path": None, "bytes": None}
    if isinstance(image, dict):
        reference.update(path=image.get("path"), bytes=image.get("bytes"))
    elif isinstance(image, str):
        reference["path"] = image
    reference["alternative"] = record.get("image_path")
    has_image = any(reference.values())
    subset = str(record.get("origin_dataset") or record.get("ds_name") or "")
    return (
        [reference] if has_image else [],
        [("user", _text(record["question"]))],
        _text(record["chosen"]),
        _text(record["rejected"]),
        subset,
        "",
    )


READERS = {"veritune": _from_veritune, "finer": _from_finer, "rlaif-v": _from_rlaif}


# ---- images


def load_images(paths: list[str], max_pixels: int | None = None, max_pixels_per_image: int | None = None) -> list[Any]:
    """Open one row's images as RGB, scaled down (aspect kept) to the row's per-image budget: ``max_pixels`` for
    one image, ``max_pixels_per_image`` (else ``max_pixels`` shared) for several (:func:`core.images.image_budget`)."""
    from core.images import image_budget, load_image

    budget = image_budget(len(paths), max_pixels or 1 << 62, max_pixels_per_image)
    return [load_image(path, budget) for path in paths]


def with_images(dataset: Any, max_pixels: int | None = None, max_pixels_per_image: int | None = None) -> Any:
    """Set a transform on ``dataset`` that turns its ``images`` paths into PIL images on access (each row's at its
    per-image budget, :func:`load_images`); returns it."""

    def open_images(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch["images"] = [load_images(paths, max_pixels, max_pixels_per_image) for paths in batch["images"]]
        return batch

    dataset.set_transform(open_images)
    return dataset


# ---- the readers


def _prompt(turns: list[tuple[str, str]], num_images: int) -> list[dict[str, Any]]:
    """TRL's conversational prompt: image placeholders first in the first user turn (``<image>`` tokens removed)."""
    messages = []
    placed = False
    for role, text in turns:
        text = _IMAGE_TOKEN.sub(" ", text).strip()
        content: list[dict[str, Any]] = []
        if role == "user" and not placed:
            content += [{"type": "image"} for _ in range(num_images)]
            placed = True
        content.append({"type": "text", "text": text})
        messages.append({"role": role, "content": content})
    return messages


def _answer(text: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": [{"type": "text", "text": text}]}]


def iter_preference_rows(
    path: str | Path,
    image_root: str | Path | None = None,
    fmt: str = "auto",
    *,
    split: str = "train",
    report: PreferenceReport | None = None,
    extract_dir: str | Path | None = None,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Rows ``{images, prompt, chosen, rejected, subset, polarity}`` from any supported layout (see the module
    doc; ``dataset_name`` reads a Hub dataset instead of ``path``); ``report`` (if given) counts what was kept
    and dropped."""
    path = Path(path or ".")
    if fmt != "auto" and fmt not in READERS:
        raise UserError(f"unknown preference format {fmt!r}; choose auto, {', '.join(READERS)}")
    report = report if report is not None else PreferenceReport()
    if image_root is None:
        if _is_veritune_dir(path):
            image_root = read_json(path / "manifest.json", what="dataset manifest").get("image_root") or path
        else:
            image_root = path if path.is_dir() else path.parent
    root = Path(image_root)
    if extract_dir:
        extract = Path(extract_dir)
    elif dataset_name or is_saved_dataset(path):
        extract = embedded_image_dir(path, dataset_name)
    else:
        extract = (path if path.is_dir() else path.parent) / f"{path.stem}-images"
    for where, record in _iter_records(path, split, dataset_name, dataset_config):
        kind = detect_format(record, where) if fmt == "auto" else fmt
        try:
            images, turns, chosen, rejected, subset, polarity = READERS[kind](record)
        except (KeyError, TypeError, AttributeError) as err:
            raise UserError(f"{where}: malformed {kind} record ({type(err).__name__}: {err})") from None
        report.total += 1
        if not turns or turns[-1][0] != "user":
            raise UserError(f"{where}: the prompt must end with a user turn")
        if chosen.strip() == rejected.strip():
            report.dropped["chosen_equals_rejected"] += 1
            continue
        resolved = [resolve_image(reference, root, extract) for reference in images]
        absent = [looked_for for found, looked_for in resolved if found is None]
        if absent:
            report.dropped["missing_image"] += 1
            report.missing_images += absent
            continue
        report.kept += 1
        yield {
            "images": [found for found, _ in resolved],
            "prompt": _prompt(turns, len(images)),
            "chosen": _answer(chosen.strip()),
            "rejected": _answer(rejected.strip()),
            "subset": subset,
            "polarity": polarity,
        }


def load_preference_dataset(
    path: Path,
    image_root: Path | None = None,
    fmt: str = "auto",
    *,
    split: str = "train",
    report: PreferenceReport | None = None,
    extract_dir: Path | None = None,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
) -> Any:
    """A ``datasets.Dataset`` in TRL's conversational preference format (``images`` as absolute paths; call
    :func:`with_images` to open them on access). Raises :class:`UserError` when no row is usable."""
    from datasets import Dataset

    report = report if report is not None else PreferenceReport()
    rows = list(
        iter_preference_rows(
            path,
            image_root,
            fmt,
            split=split,
            report=report,
            extract_dir=extract_dir,
            dataset_name=dataset_name,
            dataset_config=dataset_config,
        )
    )
    for missing in report.missing_images[:10]:
        logger.warning("missing image, row skipped: %s", missing)
    label = source_label(path, dataset_name, dataset_config, split)
    if not rows:
        raise UserError(f"{label}: no usable preference rows ({report.summary()})")
    logger.info("%s: %s", label, report.summary())
    return Dataset.from_list(rows)
