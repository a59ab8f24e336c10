"""POPE's question file (official JSON lines ``coco_pope_{random,popular,adversarial}.json``: ``question_id``,
``image``, ``text``, ``label``): the format's one home, read by the POPE and RePOPE benchmarks
(``eval_hooks/benchmarks/``) and by GRPO's replay data (``finetune/oric_data.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl

SUBSETS = ("random", "popular", "adversarial")
FIELDS = ("question_id", "image", "text", "label")


@dataclass(frozen=True)
class PopeQuestion:
    """One question of a POPE file: ``id`` is ``<subset>/<question_id>``, ``image`` under the image root."""

    id: str
    text: str
    image: Path
    label: str
    subset: str


def read_pope_file(file: Path, what: str = "POPE file") -> list[dict[str, Any]]:
    """The records of a POPE-format question file (JSON lines; POPE's and RePOPE's annotations), each checked
    for POPE's fields and a yes/no label.

    Raises:
        UserError: naming the file and line of the first record that is not one.
    """
    records = read_json_or_jsonl(file, what=what)
    for row, record in enumerate(records):
        if not isinstance(record, dict) or not set(FIELDS) <= record.keys():
            raise UserError(f"{file}: line {row + 1}: expected POPE fields {', '.join(FIELDS)}")
        if record["label"] not in ("yes", "no"):
            raise UserError(f"{file}: line {row + 1}: label {record['label']!r} is not yes or no")
    return records


def read_pope_questions(data_path: Path, image_root: Path | None = None) -> list[PopeQuestion]:
    """The questions of a POPE file, or of a folder's ``coco_pope_<subset>.json`` files (those present, in
    :data:`SUBSETS` order); images under ``image_root``, else beside the file(s). A file's subset is the one
    its name holds, else its stem.

    Raises:
        UserError: a missing file or a record that is not POPE's (:func:`read_pope_file`).
    """
    data_path = Path(data_path)
    files = [data_path / f"coco_pope_{s}.json" for s in SUBSETS] if data_path.is_dir() else [data_path]
    files = [f for f in files if f.is_file()] or files[:1]
    root = Path(image_root) if image_root else data_path if data_path.is_dir() else data_path.parent
    questions = []
    for file in files:
        subset = next((s for s in SUBSETS if s in file.name), file.stem)
        for record in read_pope_file(file):
            questions.append(
                PopeQuestion(
                    f"{subset}/{record['question_id']}", record["text"], root / record["image"], record["label"], subset
                )
            )
    return questions
