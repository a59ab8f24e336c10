"""Readers for preference data into one shape for ``finetune/dpo.py``.

Formats (``fmt="auto"`` picks by layout):
- ``veritune``: a ``veritune build finer`` directory (``train.jsonl``/``validation.jsonl`` + manifest);
- ``finer``: the FINER-Tuning release (sharegpt-style JSONL: ``conversations`` with the human turn,
  ``chosen``/``rejected`` as ``{"from": "gpt", "value": ...}``, ``images``, ``meta{qa_type, polarity}``);
- ``rlaif-v``: RLAIF-V rows (``image``, ``question``, ``chosen``, ``rejected``).

Rows come back with ``image_paths`` (absolute paths; images are decoded lazily by the trainer's data
transform), conversational ``prompt``/``chosen``/``rejected``, and ``subset``/``polarity`` when known.
Rows whose chosen equals rejected are dropped and counted; rows with missing images are listed, skipped
and counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veritune.errors import UserError
from veritune.io import iter_jsonl, read_json, read_json_or_jsonl


@dataclass
class PreferenceReport:
    total: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    missing_images: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.kept}/{self.total} preference rows kept; dropped: {dict(self.dropped) or 'none'}"


def _text(turn: Any) -> str:
    if isinstance(turn, dict):
        return str(turn.get("value", turn.get("content", "")))
    if isinstance(turn, list) and turn:
        return _text(turn[-1])
    return str(turn)


def _from_veritune(record: dict[str, Any]) -> dict[str, Any]:
    return {"images": record["images"], "question": _text(record["prompt"]), "chosen": _text(record["chosen"]),
            "rejected": _text(record["rejected"]), "subset": record.get("subset"), "polarity": record.get("polarity")}  # fmt: skip


def _from_finer(record: dict[str, Any]) -> dict[str, Any]:
    human = [t for t in record["conversations"] if t.get("from") in ("human", "user")]
    question = _text(human[-1] if human else record["conversations"][-1]).replace("<image>", "").strip()
    meta = record.get("meta") or {}
    return {"images": record.get("images") or [], "question": question, "chosen": _text(record["chosen"]),
            "rejected": _text(record["rejected"]), "subset": meta.get("qa_type"), "polarity": meta.get("polarity")}  # fmt: skip


def _from_rlaif(record: dict[str, Any]) -> dict[str, Any]:
    image = record.get("image") or record.get("image_path")
    if isinstance(image, dict):
        image = image.get("path")
    return {"images": [image] if image else [], "question": record["question"], "chosen": _text(record["chosen"]),
            "rejected": _text(record["rejected"]), "subset": record.get("ds_name"), "polarity": None}  # fmt: skip


READERS = {"veritune": _from_veritune, "finer": _from_finer, "rlaif-v": _from_rlaif}
REQUIRED = {"veritune": ("images", "prompt", "chosen", "rejected"), "finer": ("conversations", "chosen", "rejected"),
            "rlaif-v": ("question", "chosen", "rejected")}  # fmt: skip


def detect_format(record: dict[str, Any]) -> str:
    for fmt, keys in REQUIRED.items():
        if all(k in record for k in keys):
            return fmt
    raise UserError(
        "unknown preference format: expected veritune (images, prompt, chosen, rejected), FINER-Tuning "
        "(conversations, chosen, rejected, images, meta) or RLAIF-V (image, question, chosen, rejected) fields"
    )


def read_preference_rows(path: str | Path, image_root: str | Path | None = None, fmt: str = "auto",
                         split: str = "train") -> tuple[list[dict[str, Any]], PreferenceReport]:  # fmt: skip
    """Rows ``{image_paths, prompt, chosen, rejected, subset, polarity}`` from any supported file."""
    path = Path(path)
    if path.is_dir():
        manifest = read_json(path / "manifest.json", what="FINER dataset manifest") if (path / "manifest.json").is_file() else {}
        image_root = image_root or manifest.get("image_root")
        records = [r for _, r in iter_jsonl(path / f"{split}.jsonl", what=f"{split} split")]
    else:
        records = read_json_or_jsonl(path, what="preference file")
    root = Path(image_root) if image_root else (path if path.is_dir() else path.parent)
    report = PreferenceReport(total=len(records))
    rows = []
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise UserError(f"{path}: row {number}: expected an object")
        kind = detect_format(record) if fmt == "auto" else fmt
        if kind not in READERS:
            raise UserError(f"unknown preference format {fmt!r}; choose auto, {', '.join(READERS)}")
        try:
            row = READERS[kind](record)
        except (KeyError, TypeError, IndexError) as err:
            raise UserError(f"{path}: row {number}: malformed {kind} record ({type(err).__name__}: {err})") from None
        if row["chosen"].strip() == row["rejected"].strip():
            report.dropped["chosen_equals_rejected"] += 1
            continue
        paths = [str(root / image) for image in row["images"]]
        absent = [p for p in paths if not Path(p).is_file()]
        if absent:
            report.dropped["missing_image"] += 1
            report.missing_images += absent
            continue
        rows.append({
            "image_paths": paths,
            "prompt": [{"role": "user", "content": row["question"]}],
            "chosen": [{"role": "assistant", "content": row["chosen"]}],
            "rejected": [{"role": "assistant", "content": row["rejected"]}],
            "subset": row["subset"] or "", "polarity": row["polarity"] or "",
        })  # fmt: skip
    report.kept = len(rows)
    return rows, report
