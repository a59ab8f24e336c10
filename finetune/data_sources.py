"""Where a training set comes from, read through Hugging Face ``datasets`` as TRL users write it.

A recipe names its data in one of two ways (``ScriptArguments``):

- ``dataset_path``: a JSON list (``.json``), JSON lines (``.jsonl``, or a ``.json`` that is not a list), a
  parquet file or a folder of parquet files, or a folder written by ``Dataset.save_to_disk`` /
  ``DatasetDict.save_to_disk``;
- ``dataset_name`` (+ ``dataset_config``, ``dataset_train_split``): a Hub dataset id, as in TRL's
  ``ScriptArguments`` and open-r1's recipes, loaded by ``datasets.load_dataset`` (offline, from the
  ``datasets`` cache a previous load left, with ``HF_HUB_OFFLINE=1``).

Parquet, ``save_to_disk`` folders and Hub datasets are loaded by ``datasets`` (``load_dataset``,
``load_from_disk``); JSON and JSON lines keep veritune's line-exact readers (``core.io``), so a
malformed file is named with its line. Every record is yielded with where it came from (``FILE: row N``,
``FILE, line N``, ``NAME [split]: row N``) for the readers' one-line errors.

Images are either paths (relative to ``image_root``) or ``datasets.Image`` features embedded in the data;
rows are read without decoding (``{"bytes", "path"}``) and :func:`resolve_image` turns either into a file
path (embedded bytes are written once, content-addressed, to :func:`embedded_image_dir`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_bytes, iter_jsonl, read_json

ROW_BATCH = 256


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder written by ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``)."""
    return path.is_dir() and (
        (path / "dataset_dict.json").is_file()
        or ((path / "state.json").is_file() and (path / "dataset_info.json").is_file())
    )


def parquet_files(path: Path, split: str = "train") -> list[Path]:
    """The parquet file ``path``, or the parquet files of a folder (directly in it or in its ``data/``, as a
    Hub repository holds them): those of ``split`` when files are named by split (``train.parquet``,
    ``train-00000-of-00001.parquet``), else all of them."""
    if path.is_file() and path.suffix == ".parquet":
        return [path]
    if not path.is_dir():
        return []
    files = sorted([*path.glob("*.parquet"), *path.glob("data/*.parquet")])
    of_split = [f for f in files if f.stem == split or f.stem.startswith(f"{split}-")]
    return of_split or ([] if any(_split_named(f) for f in files) else files)


def parquet_has_split(path: Path, split: str) -> bool:
    """Whether a parquet folder holds files named for ``split``."""
    return any(f.stem == split or f.stem.startswith(f"{split}-") for f in _folder_parquet(path))


def _split_named(file: Path) -> bool:
    return file.stem.split("-")[0] in ("train", "validation", "test")


def uses_datasets(path: str | os.PathLike[str] | None, name: str | None = None) -> bool:
    """Whether this source is read by ``datasets`` (Hub id, parquet, ``save_to_disk``), not a JSON reader."""
    if name:
        return True
    if path is None:
        return False
    path = Path(path)
    return is_saved_dataset(path) or (path.suffix == ".parquet" and path.is_file()) or bool(_folder_parquet(path))


def _folder_parquet(path: Path) -> list[Path]:
    return sorted([*path.glob("*.parquet"), *path.glob("data/*.parquet")]) if path.is_dir() else []


def source_label(path: str | os.PathLike[str] | None, name: str | None, config: str | None, split: str) -> str:
    """How a source is named in messages and summaries."""
    if name:
        return f"{name}{f' ({config})' if config else ''} [{split}]"
    return str(path)


def _load_hub(name: str, config: str | None, split: str) -> Any:
    import datasets

    try:
        return datasets.load_dataset(name, config, split=split)
    except (OSError, ValueError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        offline = (
            " (HF_HUB_OFFLINE is set: only datasets already in the datasets cache load)"
            if datasets.config.HF_HUB_OFFLINE
            else ""
        )
        raise UserError(
            f"dataset_name: {name}{f' ({config})' if config else ''}, split {split}: {first}{offline}"
        ) from None


def saved_splits(path: Path) -> list[str] | None:
    """The splits of a ``DatasetDict.save_to_disk`` folder (None for a single ``Dataset``)."""
    if (path / "dataset_dict.json").is_file():
        return list(read_json(path / "dataset_dict.json", what="dataset_dict.json").get("splits", []))
    return None


def _load_saved(path: Path, split: str) -> Any:
    from datasets import DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(path))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot load this save_to_disk folder ({str(err).splitlines()[0]})") from None
    if isinstance(loaded, DatasetDict):
        if split not in loaded:
            raise UserError(f"{path}: no split '{split}' in this DatasetDict (it has: {', '.join(loaded)})")
        return loaded[split]
    return loaded


def _load_parquet(files: list[Path]) -> Any:
    from datasets import load_dataset

    try:
        return load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    except (OSError, ValueError) as err:
        raise UserError(f"{files[0]}: cannot read as parquet ({str(err).splitlines()[0]})") from None


def raw_rows(dataset: Any) -> Iterator[dict[str, Any]]:
    """The rows of a ``datasets.Dataset`` as plain values, images undecoded (``{"bytes", "path"}``)."""
    for table in dataset.with_format("arrow").iter(batch_size=ROW_BATCH):
        yield from table.to_pylist()


def iter_records(
    path: str | os.PathLike[str] | None,
    *,
    name: str | None = None,
    config: str | None = None,
    split: str = "train",
    what: str = "dataset file",
) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for every record of the source (module doc); ``where`` names the file or dataset
    and the row (0-based) or line (1-based)."""
    if name:
        label = source_label(None, name, config, split)
        for row, record in enumerate(raw_rows(_load_hub(name, config, split))):
            yield f"{label}: row {row}", record
        return
    if path is None:
        raise UserError("dataset_path or dataset_name: one is required")
    path = Path(path)
    if is_saved_dataset(path):
        for row, record in enumerate(raw_rows(_load_saved(path, split))):
            yield f"{path}: row {row}", record
        return
    files = parquet_files(path, split)
    if files:
        for row, record in enumerate(raw_rows(_load_parquet(files))):
            yield f"{path}: row {row}", record
        return
    if _folder_parquet(path):
        raise UserError(
            f"{path}: no parquet file of split '{split}' (files: {', '.join(f.name for f in _folder_parquet(path))})"
        )
    if path.is_dir():
        raise UserError(f"{path}: a folder, but neither a save_to_disk dataset nor a folder of parquet files")
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    with path.open("rb") as handle:
        head = handle.read(1 << 12).lstrip()
    if head.startswith(b"["):
        data = read_json(path, what=what)
        for row, record in enumerate(data):
            yield f"{path}: row {row}", record
    elif path.suffix == ".json" and not _json_lines(path):
        data = read_json(path, what=what)  # not valid JSON: its error names the line
        raise UserError(f"{path}: a JSON {type(data).__name__}; expected a JSON list of records (or JSON lines)")
    else:
        for number, record in iter_jsonl(path, what=what):
            yield f"{path}, line {number}", record


def _json_lines(path: Path) -> bool:
    """Whether a ``.json`` file that is not a list reads as JSON lines: its first line is one JSON object and
    the whole file is not."""
    import json

    with path.open("rb") as handle:
        first = handle.readline()
    try:
        json.loads(first)
    except ValueError:
        return False
    try:
        json.loads(path.read_bytes())
    except ValueError:
        return True
    return False


def embedded_image_dir(path: str | os.PathLike[str] | None, name: str | None) -> Path:
    """Where embedded images of a source are written as files: beside a local source
    (``<file stem>-images``, or inside its folder), else under ``$VERITUNE_CACHE/dataset-images/<name>``."""
    if name:
        cache = Path(os.environ.get("VERITUNE_CACHE", Path.home() / ".cache" / "veritune"))
        return cache / "dataset-images" / name.replace("/", "--")
    source = Path(path or ".")
    return source / ".images" if source.is_dir() else source.parent / f"{source.stem}-images"


def resolve_image(reference: Any, root: Path, extract_dir: Path) -> tuple[str | None, str]:
    """An existing absolute image path for a reference (a path under ``root``, or an embedded image
    ``{"bytes", "path"}``), or ``(None, what was looked for)``."""
    if isinstance(reference, str):
        path = Path(reference) if Path(reference).is_absolute() else root / reference
        return (str(path), str(path)) if path.is_file() else (None, str(path))
    if not isinstance(reference, dict):
        return None, f"(not an image path or an image feature: {type(reference).__name__})"
    tried = []
    for key in ("path", "alternative"):
        value = reference.get(key)
        if value:
            path = Path(value) if Path(value).is_absolute() else root / value
            if path.is_file():
                return str(path), str(path)
            tried.append(str(path))
    data = reference.get("bytes")
    if data:
        suffix = Path(reference.get("path") or "").suffix or ".png"
        target = extract_dir / f"{hashlib.sha1(data).hexdigest()[:20]}{suffix}"
        if not target.is_file():
            atomic_write_bytes(target, data)
        return str(target), str(target)
    return None, tried[0] if tried else "(no image path)"
