"""A Hugging Face ``datasets`` copy of a build (``--also-save parquet|disk``), with a dataset card.

Beside the build's own output (``<out>`` and its manifest, unchanged), ``<out stem>-hf/`` holds:

- ``parquet``: ``data/<split>.parquet`` and ``README.md`` whose YAML ``configs`` name them: the layout of a
  Hub dataset repository (``huggingface-cli upload ORG/NAME <out stem>-hf . --repo-type dataset`` publishes
  it; ``load_dataset("ORG/NAME")`` then reads it), also readable here as a recipe's ``dataset_path``;
- ``disk``: ``Dataset.save_to_disk`` (one split) or ``DatasetDict.save_to_disk`` (several) and the same
  ``README.md``; ``datasets.load_from_disk`` or a recipe's ``dataset_path`` reads it.

Images are embedded (``datasets.Image`` features, the files' bytes), so the copy stands alone; the
training readers accept embedded images as they accept paths under ``image_root`` (finetune/data_sources.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.ownership import check_not_protected, is_empty_or_missing

HF_FORMATS = ("parquet", "disk")
_CARD_HEAD = "---\ntags:\n- veritune\n- hallucination\n"  # how every dataset card of a copy begins


def add_also_save_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--also-save {parquet,disk}``."""
    parser.add_argument(
        "--also-save",
        choices=HF_FORMATS,
        help="also write a datasets copy with a dataset card to <out stem>-hf/: parquet or disk (save_to_disk)",
    )


def hf_copy_path(out: Path) -> Path:
    """Where the copy of the build ``out`` (a file or a folder) goes."""
    return out.with_name(f"{out.stem if out.suffix else out.name}-hf")


def check_hf_copy_target(out: Path) -> None:
    """Check, before the build, that the copy's folder (:func:`hf_copy_path`) may be replaced: missing, empty, or
    an earlier copy (its dataset card says veritune built it).

    Raises:
        UserError: ``--also-save <out stem>-hf``: holds files no veritune copy wrote, or is a protected folder.
    """
    dest = hf_copy_path(out)
    check_not_protected(dest, "--also-save")
    if is_empty_or_missing(dest) or _is_copy(dest):
        return
    raise UserError(
        f"--also-save {dest}: holds files not written by --also-save (no veritune dataset card README.md); "
        "veritune replaces only a copy it made: move it away, or choose another --out"
    )


def _is_copy(folder: Path) -> bool:
    """Whether ``folder`` holds a copy this module wrote (its :func:`dataset_card`)."""
    try:
        card = (folder / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return card.startswith(_CARD_HEAD) and "\nBuilt by `veritune " in card


def _embedded(reference: str, image_root: Path) -> dict[str, Any]:
    path = image_root / reference
    if not path.is_file():
        raise UserError(f"--also-save: image not found: {path}")
    return {"bytes": path.read_bytes(), "path": reference}


def _dataset(rows: list[dict[str, Any]], image_key: str, image_root: Path) -> Any:
    from datasets import Dataset, Image, List

    many = bool(rows) and isinstance(rows[0].get(image_key), list)
    embedded = [
        {
            **row,
            image_key: [_embedded(r, image_root) for r in row[image_key]]
            if many
            else _embedded(row[image_key], image_root),
        }
        for row in rows
    ]
    # Nested provenance fields of mixed types are stored as JSON text, so every row has one schema.
    for row in embedded:
        for key, value in row.items():
            if key != image_key and isinstance(value, (dict, list)) and key not in ("prompt", "chosen", "rejected"):
                row[key] = json.dumps(value, sort_keys=True)
    dataset = Dataset.from_list(embedded)
    return dataset.cast_column(image_key, List(Image()) if many else Image())


def dataset_card(name: str, command: str, splits: dict[str, int], fmt: str, manifest: Path | None) -> str:
    """The copy's ``README.md``: Hub metadata (``configs`` for parquet), what it is, how to load it."""
    meta = _CARD_HEAD.splitlines()
    if fmt == "parquet":
        meta += ["configs:", "- config_name: default", "  data_files:"]
        meta += [f"  - split: {split}\n    path: data/{split}.parquet" for split in splits]
    meta += ["---", ""]
    rows = ", ".join(f"{split}: {count} rows" for split, count in splits.items())
    load = (
        'load_dataset("parquet", data_dir="THIS_FOLDER/data")  # or load_dataset("ORG/NAME") once uploaded'
        if fmt == "parquet"
        else 'load_from_disk("THIS_FOLDER")'
    )
    body = [
        f"# {name}",
        "",
        f"Built by `veritune {command}` ({rows}); images embedded as `datasets.Image` features.",
        "",
        f"- build manifest (inputs, settings, sha256): `{manifest.name}` beside the build"
        if manifest
        else "- no build manifest",
        f"- load: `{load}`",
        "- train on it: a recipe's `dataset_path: THIS_FOLDER` (no `image_root` needed)",
        "",
    ]
    return "\n".join(meta + body)


def save_hf_copy(
    splits: dict[str, list[dict[str, Any]]],
    *,
    out: Path,
    image_key: str,
    image_root: Path,
    fmt: str,
    command: str,
    manifest: Path | None = None,
) -> Path:
    """Write the copy of the build ``out`` (module doc); returns its folder. A previous copy is replaced."""
    from datasets import DatasetDict

    check_hf_copy_target(out)
    dest = hf_copy_path(out)
    staging = dest.with_name(f".{dest.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    tables = {split: _dataset(rows, image_key, image_root) for split, rows in splits.items() if rows}
    if fmt == "parquet":
        (staging / "data").mkdir(parents=True)
        for split, table in tables.items():
            table.to_parquet(staging / "data" / f"{split}.parquet")
    elif len(tables) == 1 and "train" in tables:
        tables["train"].save_to_disk(str(staging))
    else:
        DatasetDict(tables).save_to_disk(str(staging))
    counts = {split: len(table) for split, table in tables.items()}
    (staging / "README.md").write_text(dataset_card(dest.name, command, counts, fmt, manifest), encoding="utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest
