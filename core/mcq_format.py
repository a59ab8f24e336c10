"""The multiple-choice format shared by training and the benchmarks: the option letters, lettered options and
the option block of a prompt (every MCQ benchmark, the warm-start data), and MIOH's question record and prompt
("Fine-Grained Multi-Image Object Hallucination Benchmark", Sec. 3, Table 1 and Fig. 2), read by the ``mioh``
benchmark and by GRPO's multi-image data (``multi_image_path``), so a trained question reads as the bench's."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl

# The option letters of a multiple-choice answer: those the SFT warm-start writes as the right answer and
# those the option grader reads (rewards.graders.extract_option).
OPTION_LETTERS = "ABCDEFGHIJ"

MIOH_FIELDS = ("id", "images", "question", "options", "answer", "task", "pattern", "pressure")
MIOH_TASKS = ("existence", "counting", "attribute", "position")
MIOH_PATTERNS = ("comprehensive", "comparative", "selective")
MIOH_PRESSURES = ("easy", "hard_negative", "hard_positive", "num_images")


def lettered(options: Iterable[str]) -> dict[str, str]:
    """``{"A": first, "B": second, ...}`` for the non-empty options, in order."""
    return {OPTION_LETTERS[i]: str(text) for i, text in enumerate(o for o in options if str(o).strip())}


def option_block(options: dict[str, str]) -> str:
    """One option per line: ``A. text``."""
    return "\n".join(f"{letter}. {text}" for letter, text in options.items())


def letter_list(options: dict[str, str]) -> str:
    """``"A, B, C, D, or E"``: the letters of ``options`` for an instruction."""
    letters = list(options)
    return letters[0] if len(letters) == 1 else ", ".join(letters[:-1]) + f", or {letters[-1]}"


def mioh_prompt(question: str, options: dict[str, str], num_images: int) -> str:
    """MIOH's prompt: the images named in order, the question, the lettered options, a request for the letter."""
    names = ", ".join(f"Image {i}" for i in range(1, num_images + 1))
    return (
        f"The images above are, in order, {names}.\n{question}\n{option_block(options)}\n"
        f"Answer with the letter of the correct option ({letter_list(options)}) only."
    )


@dataclass(frozen=True)
class MiohQuestion:
    """One checked MIOH record: its images resolved against the image root, its options lettered."""

    id: str
    images: list[Path]
    question: str
    options: dict[str, str]
    answer: str
    task: str
    pattern: str
    pressure: str
    num_images: int

    @property
    def prompt(self) -> str:
        return mioh_prompt(self.question, self.options, len(self.images))


def read_mioh_questions(data_path: Path, image_root: Path | None = None) -> list[MiohQuestion]:
    """The questions of a MIOH file (a JSON list or JSON lines), images relative to ``image_root`` (default: the
    file's folder).

    Raises:
        UserError: naming the file and row: a field missing, an answer that is no option, a task, pattern or
            pressure out of MIOH's, no images; or no question at all.
    """
    records = read_json_or_jsonl(data_path, what="MIOH file")
    root = Path(image_root) if image_root else Path(data_path).parent
    questions = []
    for row, record in enumerate(records):
        questions.append(_question(record, data_path, row, root))
    if not questions:
        raise UserError(f"{data_path}: no MIOH question found")
    return questions


def _question(record: Any, data_path: Path, row: int, root: Path) -> MiohQuestion:
    missing = [f for f in MIOH_FIELDS if not isinstance(record, dict) or f not in record]
    if missing:
        raise UserError(
            f"{data_path}: row {row}: missing field '{missing[0]}' (MIOH records have {', '.join(MIOH_FIELDS)})"
        )
    raw = record["options"]
    options = {str(k).strip().upper(): str(v) for k, v in raw.items()} if isinstance(raw, dict) else lettered(raw)
    answer = str(record["answer"]).strip().upper()
    if answer not in options:
        raise UserError(
            f"{data_path}: row {row}: answer {record['answer']!r} is not one of the options {', '.join(options)}"
        )
    for field, allowed in (("task", MIOH_TASKS), ("pattern", MIOH_PATTERNS), ("pressure", MIOH_PRESSURES)):
        if record[field] not in allowed:
            raise UserError(f"{data_path}: row {row}: {field} {record[field]!r} is not one of {', '.join(allowed)}")
    if not isinstance(record["images"], list) or not record["images"]:
        raise UserError(f"{data_path}: row {row}: images must be a non-empty list of paths")
    images = [root / str(path) for path in record["images"]]
    return MiohQuestion(
        id=str(record["id"]),
        images=images,
        question=str(record["question"]),
        options=options,
        answer=answer,
        task=record["task"],
        pattern=record["pattern"],
        pressure=record["pressure"],
        num_images=int(record.get("num_images") or len(images)),
    )
