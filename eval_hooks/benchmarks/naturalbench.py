"""NaturalBench (Baiqi-Li/NaturalBench, NeurIPS 2024): groups of two images and two questions whose
answers flip between the images, so a "blind" model cannot score.

Release layout (the BaiqiL/NaturalBench dataset): parquet files (``data/*.parquet``) with one row per
group: ``Index``, ``Image_0``, ``Image_1`` (embedded images: ``{bytes, path}``), ``Question_0``,
``Question_1``, the four answers ``Image_0_Question_0``, ``Image_1_Question_0``, ``Image_0_Question_1``,
``Image_1_Question_1`` ("Yes"/"No", or "A"/"B"), ``Question_Type`` (``yes_no`` or ``multiple_choice``)
and optionally ``Source``. The same columns in a JSON / JSON-lines file, with image file names instead
of embedded images, are read too. Embedded images are written once to ``<folder>/images/`` (or the
image root), named by ``<Index>_<0|1>`` (letters, digits, ``_``, ``-`` only) and a digest of their bytes
(:func:`core.images.extract_embedded_image`).

Protocol of ``naturalbench_vqa.py``: four items per group (q0 on i0, q0 on i1, q1 on i0, q1 on i1), the
prompt is the question immediately followed by "Please answer Yes or No." or "Please output the letter
corresponding to the correct option." (concatenated without a space, as the official code does); the
answer is read by ``extract_answer`` (whichever of yes/no, or A/B, occurs first as a whole word).
``get_scores``: Acc over the four items; Q_Acc, a question is right when both of its images are; I_Acc,
an image is right when both of its questions are; G_Acc (the paper's metric), a group is right when all
four are. In percent. Deviation: the official ``get_scores`` assumes the release's answer pattern
(q0_i0 and q1_i1 are yes/A, the others no/B); veritune compares with each item's released answer, which
is the same on the official release and also correct on re-ordered files. A group cut by ``--limit``
is left out; an item whose image is missing is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.images import extract_embedded_image
from core.io import read_json_or_jsonl
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import Benchmark, EvalItem
from rewards.graders import completion_text

SUFFIX = {
    "yes_no": "Please answer Yes or No.",
    "multiple_choice": "Please output the letter corresponding to the correct option.",
}
FIELDS = (
    "Index",
    "Image_0",
    "Image_1",
    "Question_0",
    "Question_1",
    "Image_0_Question_0",
    "Image_1_Question_0",
    "Image_0_Question_1",
    "Image_1_Question_1",
    "Question_Type",
)
CELLS = (("q0_i0", 0, 0), ("q0_i1", 0, 1), ("q1_i0", 1, 0), ("q1_i1", 1, 1))  # the official order of the four items
TRUE_VALUES = {"yes": 1, "a": 1, "no": 0, "b": 0}


def _read_rows(path: Path) -> tuple[list[dict[str, Any]], Path]:
    """The group rows and the file they came from (for messages)."""
    if path.is_dir():
        files = sorted(path.rglob("*.parquet")) or sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
        if not files:
            raise UserError(f"{path}: no NaturalBench parquet (data/*.parquet) or JSON file in this folder")
    else:
        files = [path]
    rows: list[dict[str, Any]] = []
    for file in files:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                rows += pq.read_table(file).to_pylist()
            except Exception as err:  # noqa: BLE001 - any unreadable parquet is the user's file
                raise UserError(f"{file}: not a readable parquet file ({err})") from None
        else:
            rows += read_json_or_jsonl(file, what="NaturalBench file")
    return rows, files[0]


def _image_file(value: Any, index: str, side: int, folder: Path, image_dir: Path) -> Path:
    """An embedded image written once to ``image_dir``, or a file name resolved under ``folder``."""
    if isinstance(value, dict) and value.get("bytes"):
        return extract_embedded_image(value["bytes"], image_dir, f"{index}_{side}")
    if isinstance(value, dict):
        value = value.get("path")
    return folder / str(value)


class NaturalBench(Benchmark):
    name = "naturalbench"
    limit_strata = ("type",)
    limit_groups = ("group",)  # two images x two questions, scored together
    default_max_new_tokens = 64
    data_layout = "naturalbench/data/*.parquet (official; images embedded, written once to naturalbench/images/)"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "naturalbench", data_root / "naturalbench" / "images"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        rows, first_file = _read_rows(data_path)
        folder = data_path if data_path.is_dir() else data_path.parent
        image_dir = Path(image_root) if image_root else folder / "images"
        items = []
        for number, row in enumerate(rows):
            missing = [field for field in FIELDS if field not in row]
            if not isinstance(row, dict) or missing:
                raise UserError(f"{first_file}: row {number}: expected NaturalBench columns {', '.join(FIELDS)}")
            kind = str(row["Question_Type"])
            if kind not in SUFFIX:
                raise UserError(f"{first_file}: row {number}: Question_Type {kind!r} is not yes_no or multiple_choice")
            index = str(row["Index"])
            images = [_image_file(row[f"Image_{side}"], index, side, folder, image_dir) for side in (0, 1)]
            for cell, q, i in CELLS:
                truth = str(row[f"Image_{i}_Question_{q}"]).strip().lower()
                if truth not in TRUE_VALUES:
                    raise UserError(
                        f"{first_file}: row {number}: Image_{i}_Question_{q} "
                        f"{row[f'Image_{i}_Question_{q}']!r} is not Yes/No or A/B"
                    )
                items.append(
                    EvalItem(
                        id=f"{index}/{cell}",
                        prompt=str(row[f"Question_{q}"]) + SUFFIX[kind],
                        images=[images[i]],
                        max_new_tokens=self.default_max_new_tokens,
                        meta={
                            "group": index,
                            "cell": cell,
                            "type": kind,
                            "answer": str(row[f"Image_{i}_Question_{q}"]),
                            "truth": TRUE_VALUES[truth],
                            "source": str(row.get("Source") or ""),
                        },
                        missing_images=[] if images[i].is_file() else [images[i]],
                    )
                )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        groups: dict[str, dict[str, bool]] = {}
        types: dict[str, str] = {}
        unresolved = 0
        for item in items:
            value = -1 if item.missing_images else naturalbench_answer(predictions.get(item.id, ""), item.meta["type"])
            unresolved += value == -1 and not item.missing_images
            groups.setdefault(item.meta["group"], {})[item.meta["cell"]] = value == item.meta["truth"]
            types[item.meta["group"]] = item.meta["type"]
        complete = {group: cells for group, cells in groups.items() if len(cells) == 4}

        def summary(selected: dict[str, dict[str, bool]]) -> dict[str, float]:
            n = len(selected)
            if not n:
                return {"Acc": 0.0, "Q_Acc": 0.0, "I_Acc": 0.0, "G_Acc": 0.0}
            question = sum((c["q0_i0"] and c["q0_i1"]) + (c["q1_i0"] and c["q1_i1"]) for c in selected.values())
            image = sum((c["q0_i0"] and c["q1_i0"]) + (c["q0_i1"] and c["q1_i1"]) for c in selected.values())
            return {
                "Acc": 100 * sum(sum(c.values()) for c in selected.values()) / (4 * n),
                "Q_Acc": 100 * question / (2 * n),
                "I_Acc": 100 * image / (2 * n),
                "G_Acc": 100 * sum(all(c.values()) for c in selected.values()) / n,
            }

        metrics = summary(complete)
        rows = []
        for kind in dict.fromkeys(types[g] for g in complete):
            values = summary({g: c for g, c in complete.items() if types[g] == kind})
            rows.append({"question_type": kind, "groups": sum(types[g] == kind for g in complete), **values})
            metrics.update({f"{kind}/{k}": v for k, v in values.items()})
        counts = {
            "items": len(items),
            "groups": len(complete),
            "incomplete_groups": len(groups) - len(complete),
            "unresolved": unresolved,
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        return {"metrics": metrics, "tables": {"per_question_type": rows}, "counts": counts}


# ---- NaturalBench's official answer parsing


_NATURALBENCH_WORDS = {"yes_no": ("yes", "no"), "multiple_choice": ("A", "B")}


def naturalbench_answer(text: Any, question_type: str) -> int:
    """NaturalBench's ``extract_answer`` (``naturalbench_vqa.py``): find the first whole-word, case-insensitive
    occurrence of "yes" and "no" ("A" and "B" for multiple choice, so the article "a" counts as A); 1 when
    only the first word occurs or it occurs first, 0 for the second, -1 when neither does."""
    first, second = _NATURALBENCH_WORDS.get(question_type, ("yes", "no"))
    text = (completion_text(text) or "")[:MAX_SCAN_CHARS]
    positions = []
    for word in (first, second):
        match = re.search(r"\b" + re.escape(word) + r"\b", text, re.IGNORECASE)
        positions.append(match.start() if match else -1)
    if positions == [-1, -1]:
        return -1
    if -1 not in positions:
        return 1 if positions[0] < positions[1] else 0
    return 0 if positions[0] == -1 else 1
