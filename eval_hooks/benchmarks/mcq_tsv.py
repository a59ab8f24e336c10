"""General multiple-choice suites in VLMEvalKit's TSV layout (MMStar, MMBench, SEED-Bench, ...).

Columns: ``index``, ``image`` (base64; a short value is the ``index`` of the row whose image it reuses,
as VLMEvalKit stores repeated images) or ``image_path``, ``question``, option columns ``A``, ``B``, ...
(empty cells are absent options), ``answer`` (a letter), and optionally ``hint``, ``category``,
``l2-category``. Embedded images are decoded once into ``<file stem>_images/`` beside the TSV (or under
the image root when one is given; under ``~/.cache/veritune/tsv_images/`` when that folder is read-only),
so reruns and the runner read plain files; each is named by its row's ``index`` (letters, digits, ``_``, ``-``
only) and a digest of its bytes (:func:`core.images.extract_embedded_image`), so an edited TSV, or another
TSV of the same stem, never reuses a stale image.

Prompt: the hint when present, the question, the lettered options, and a request for the letter alone
(``vlmeval_prompt = True``: VLMEvalKit's own ``ImageMCQDataset.build_prompt`` wording, as V* Bench uses).
Scoring: the letter from the shared option grader (an explicit letter first, then an option's text);
accuracy overall, per ``category`` and per ``l2-category`` when present.

The row reading and image decoding here (:func:`read_vlmeval_tsv`, :func:`tsv_row_image`) are shared with
the Y/N and VQA layouts (``eval_hooks/benchmarks/vlmeval_tsv.py``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.images import extract_embedded_image
from core.io import read_table
from eval_hooks.answers import OPTION_LETTERS
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.mcq import accuracy_table, grade_letters, letter_list, option_block, resolution_shares

FIELDS = ("index", "question", "answer")


def _blank(value: Any) -> bool:
    return value is None or str(value).strip() in ("", "nan", "NaN", "None")


def _writable_image_dir(preferred: Path, data_path: Path) -> Path:
    """Where the decoded images go: beside the TSV, or (a read-only dataset folder) a per-file folder in
    the user's cache."""
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=preferred):  # a new file of its own, never one a link points to
            pass
        return preferred
    except OSError:
        digest = hashlib.sha256(str(data_path.resolve()).encode()).hexdigest()[:16]
        fallback = (
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
            / "veritune"
            / "tsv_images"
            / f"{data_path.stem}-{digest}"
        )
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def mcq_prompt(question: str, options: dict[str, str], hint: str | None = None) -> str:
    head = f"Hint: {hint}\n" if hint else ""
    return (
        f"{head}Question: {question}\nOptions:\n{option_block(options)}\n"
        f"Answer with the option's letter ({letter_list(options)}) only."
    )


def vlmeval_mcq_prompt(question: str, options: dict[str, str], hint: str | None = None) -> str:
    """VLMEvalKit's MCQ prompt (``vlmeval/dataset/image_mcq.py`` ``ImageMCQDataset.build_prompt``), word
    for word, its trailing space and newline included."""
    head = f"Hint: {hint}\n" if hint else ""
    lines = "".join(f"{letter}. {text}\n" for letter, text in options.items())
    return f"{head}Question: {question}\nOptions:\n{lines}Please select the correct answer from the options above. \n"


def read_vlmeval_tsv(
    data_path: Path, what: str, fields: tuple[str, ...], layout: str, columns: str
) -> tuple[list[dict[str, Any]], Callable[[int, dict[str, Any], Path | None], Path]]:
    """The rows of a VLMEvalKit TSV in ``layout`` (MCQ, Y/N, VQA: its ``columns`` named in errors), checked
    for ``fields`` and an ``image`` or ``image_path`` column, and a function ``(line number, row, image
    root) -> image file`` (base64 cells decoded once, see the module docstring)."""
    rows = read_table(data_path, what=f"{what} TSV file")
    if not rows:
        raise UserError(f"{data_path}: no rows (expected VLMEvalKit's {layout} columns {columns})")
    missing = [f for f in fields if f not in rows[0]] or ([] if {"image", "image_path"} & rows[0].keys() else ["image"])
    if missing:
        raise UserError(f"{data_path}: missing column '{missing[0]}' (VLMEvalKit {layout} files have {columns})")
    by_index = {str(row["index"]): row for row in rows}
    image_dirs: list[Path] = []
    extracted: dict[str, Path] = {}  # a reused image is decoded once per load

    def image_of(number: int, row: dict[str, Any], image_root: Path | None = None) -> Path:
        if not image_dirs:  # created on first use only: a TSV of image paths needs no folder
            base = Path(image_root) if image_root else data_path.parent
            image_dirs.append(_writable_image_dir(base / f"{data_path.stem}_images", data_path))
        return tsv_row_image(data_path, number, row, by_index, image_dirs[0], extracted)

    return rows, image_of


def tsv_row_image(
    data_path: Path,
    number: int,
    row: dict[str, Any],
    by_index: dict[str, dict[str, Any]],
    image_dir: Path,
    extracted: dict[str, Path] | None = None,
) -> Path:
    """The row's image file: ``image_path`` as given, or the base64 ``image`` decoded once into ``image_dir``
    (:func:`core.images.extract_embedded_image`; ``extracted``: the files of this load, by source index)."""
    if _blank(row.get("image")) and not _blank(row.get("image_path")):
        path = Path(str(row["image_path"]))
        return path if path.is_absolute() else data_path.parent / path
    encoded, source = str(row.get("image") or ""), str(row["index"])
    if len(encoded) <= 64 and encoded in by_index:  # a reference to another row's image
        source, encoded = encoded, str(by_index[encoded].get("image") or "")
    if extracted is not None and source in extracted:
        return extracted[source]
    try:
        data = base64.b64decode(encoded, validate=False)
    except (binascii.Error, ValueError):
        raise UserError(f"{data_path}: line {number}: the image cell is not base64 data") from None
    target = extract_embedded_image(data, image_dir, source)
    if extracted is not None:
        extracted[source] = target
    return target


class VlmevalTsv(Benchmark):
    """A suite in one of VLMEvalKit's TSV layouts (MCQ here; Y/N and VQA in ``vlmeval_tsv.py``): its file under
    the data root, read with :func:`read_vlmeval_tsv`."""

    file_name = ""  # the suite's file under --data-root (default: <name>.tsv)

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        path = data_root / (self.file_name or f"{self.name}.tsv")
        return path, path.parent


class McqTsv(VlmevalTsv):
    """Any suite in VLMEvalKit's MCQ TSV layout; pass the file with ``--data mcq_tsv=FILE.tsv``."""

    name = "mcq_tsv"
    limit_strata = ("category",)
    default_max_new_tokens = 16
    answer_format = "option"
    data_layout = "a VLMEvalKit MCQ .tsv (index, image (base64), question, A, B, ..., answer, category)"
    vlmeval_prompt = False  # True: VLMEvalKit's MCQ prompt wording (vlmeval_mcq_prompt)

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        rows, image_of = read_vlmeval_tsv(
            data_path, self.name, FIELDS, "MCQ", "index, image, question, A, B, ..., answer"
        )
        letters = [letter for letter in OPTION_LETTERS if letter in rows[0]]
        if len(letters) < 2:
            raise UserError(f"{data_path}: expected option columns A, B, ... (found {', '.join(letters) or 'none'})")
        prompt = vlmeval_mcq_prompt if self.vlmeval_prompt else mcq_prompt
        items = []
        for number, row in enumerate(rows, start=2):
            options = {letter: str(row[letter]) for letter in letters if not _blank(row.get(letter))}
            answer = str(row["answer"]).strip().upper()
            if answer not in options:
                raise UserError(
                    f"{data_path}: line {number}: answer {row['answer']!r} "
                    f"is not one of the options {', '.join(options)}"
                )
            image = image_of(number, row, image_root)
            hint = None if _blank(row.get("hint")) else str(row["hint"])
            meta = {
                "options": options,
                "answer": answer,
                "category": str(row.get("category") or "all"),
                "l2_category": None if _blank(row.get("l2-category")) else str(row["l2-category"]),
            }
            items.append(self.image_item(str(row["index"]), prompt(str(row["question"]), options, hint), image, meta))
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct, resolution = grade_letters(items, predictions)
        metrics: dict[str, float] = {"accuracy": 100 * sum(correct.values()) / len(correct) if correct else 0.0}
        by_category = accuracy_table(items, correct, lambda i: i.meta["category"], "category")
        metrics.update({f"category/{row['category']}": row["accuracy"] for row in by_category})
        tables = {"by_category": by_category}
        if any(item.meta["l2_category"] for item in items):
            tables["by_l2_category"] = accuracy_table(
                items, correct, lambda i: i.meta["l2_category"] or "none", "l2_category"
            )
        metrics.update(resolution_shares(resolution))
        counts = {
            "items": len(items),
            "missing_images": resolution["missing_image"],
            "unresolved": resolution["unresolved"],
        }
        return {"metrics": metrics, "tables": tables, "counts": counts}


class MMStar(McqTsv):
    """MMStar (1,500 questions, six core capabilities) from VLMEvalKit's ``MMStar.tsv``."""

    name = "mmstar"
    data_layout = "MMStar.tsv (VLMEvalKit layout) under the data root"
    file_name = "MMStar.tsv"
