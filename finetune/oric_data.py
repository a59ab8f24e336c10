"""ORIC-format training data for GRPO: load, validate, wrap in the R1-style prompt, filter, resize.

Input is the official ORIC release format (``dataset/oric_train.json`` of the public ORIC repository, and
what ``veritune build oric`` writes): a JSON list of ``{id, image, target_object, problem, solution}``
with ``image`` relative to an image root. ``problem`` is one prompt (training file) or the list of four
paraphrases (benchmark file, of which the first is used); ``solution`` is ``yes``/``no`` or
``<SOLUTION>yes</SOLUTION>``.

Multi-image questions (``multi_image_path``) come in MIOH's format ("Fine-Grained Multi-Image Object
Hallucination Benchmark", Sec. 3, Table 1 and Fig. 2: ``id, images, question, options, answer, task, pattern,
pressure``), read and worded as the ``mioh`` benchmark reads and words them (:mod:`core.mcq_format`, the
format's one home), so a trained question reads as the benchmark's; ``multi_image_ratio`` of them per ORIC
question are mixed in. Each image of an N-image prompt is scaled to the per-image budget
(:func:`core.images.image_budget`), and a prompt still longer than ``max_prompt_length`` is dropped and
counted, never cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset
from PIL import Image
from tqdm import tqdm

from core.errors import UserError
from core.images import image_budget, load_image
from core.mcq_format import read_mioh_questions
from core.pope_format import read_pope_questions
from core.prompts import R1_OPTION_INSTRUCTION, with_r1_instruction
from core.sampling import sample_indices
from eval_hooks.paths import recorded_image_root
from finetune.data_sources import embedded_image_dir, iter_records, resolve_image, source_label
from finetune.token_lengths import prompt_lengths, rows_within
from rewards.oric import check_oric_record

PROMPT_TEMPLATES: dict[str, str] = {
    # ORIC Fig. 11: the official training file carries this prompt verbatim, so a model trained here sees
    # exactly the prompts of the released data.
    "oric_r1": with_r1_instruction("{question}"),
    "plain": "{question}",
}


@dataclass
class DataReport:
    """What preparing the training data kept and dropped, and why."""

    total: int = 0
    replayed: int = 0
    multi_image: int = 0
    kept: int = 0
    dropped_bad_image: list[str] = field(default_factory=list)
    dropped_too_long: int = 0

    def summary(self) -> str:
        parts = [f"{self.replayed} of them replayed conventional questions"] if self.replayed else []
        parts += [f"{self.multi_image} of them multi-image questions"] if self.multi_image else []
        replayed = f" ({'; '.join(parts)})" if parts else ""
        return (
            f"{self.kept}/{self.total} examples kept{replayed}; {len(self.dropped_bad_image)} dropped for missing or "
            f"unreadable images; {self.dropped_too_long} dropped as longer than max_prompt_length"
        )


def resolve_template(template: str) -> str:
    """A template key of :data:`PROMPT_TEMPLATES` or a literal template containing ``{question}``."""
    if template in PROMPT_TEMPLATES:
        return PROMPT_TEMPLATES[template]
    if "{question}" not in template:
        raise UserError(
            f"prompt_template: {template!r} is neither a known template ({', '.join(PROMPT_TEMPLATES)}) "
            "nor a string containing {question}"
        )
    return template


def question_from_problem(problem: str | list[str]) -> str:
    """The bare question of an ORIC ``problem``: the first paraphrase of a list, and for a training
    prompt the text up to its first question mark (the R1 instruction is re-applied by the template)."""
    text = problem[0] if isinstance(problem, list) else problem
    head, mark, _ = text.partition("?")
    return (head + mark).strip() if mark else text.strip()


def load_oric_records(
    path: str | Path | None, *, dataset_name: str | None = None, dataset_config: str | None = None, split: str = "train"
) -> list[dict[str, Any]]:
    """Load and validate ORIC-format records from any source of :mod:`finetune.data_sources` (a JSON list,
    JSON lines, parquet, a ``save_to_disk`` folder, a Hub dataset); every error names the source and the row."""
    records = []
    for where, item in iter_records(path, name=dataset_name, config=dataset_config, split=split):
        label = check_oric_record(item, where)
        problem = item["problem"]
        if not (isinstance(problem, str) or (isinstance(problem, list) and problem and isinstance(problem[0], str))):
            raise UserError(f"{where} (id {item['id']}): problem must be a string or a list of strings")
        image = item["image"]
        if not (isinstance(image, str) and image) and not (
            isinstance(image, dict) and (image.get("bytes") or image.get("path"))
        ):
            raise UserError(f"{where} (id {item['id']}): image must be a relative path string or an image feature")
        records.append({**item, "solution": label, "question": question_from_problem(problem)})
    return records


def load_replay_records(path: str | Path, image_root: Path) -> list[dict[str, Any]]:
    """Conventional yes/no questions to replay during GRPO, from a file in POPE's layout (read by
    :func:`core.pope_format.read_pope_questions`, the format's one home), as ORIC-format records with
    absolute image paths.

    Replay is not in the ORIC paper: its 8B model keeps its ordinary recognition while GRPO shifts its
    answers on incongruous questions. A tiny model trained on ORIC's questions alone learns the reverse of
    its prior instead and loses ordinary accuracy; questions of the warm-start's kind, which the prior
    answers right, penalise that reverse rule (the ratios measured:
    docs/LAB_NOTEBOOK_ARCHIVE.md#fourth-pass).
    """
    try:
        questions = read_pope_questions(Path(path), image_root)
    except UserError as err:
        raise UserError(f"replay_path: {err}") from None
    records = []
    for question in questions:
        words = question.text.removesuffix(" in the image?").split()
        records.append(
            {
                "id": f"replay/{question.id}",
                "image": str(question.image.resolve()),
                "target_object": " ".join(words[3:]) if words[:2] == ["Is", "there"] else "",
                "solution": question.label,
                "question": question.text,
            }
        )
    return records


def load_multi_image_records(path: str | Path, image_root: str | Path | None = None) -> list[dict[str, Any]]:
    """Multi-image questions in MIOH's format, read and checked as the ``mioh`` benchmark reads them
    (:func:`core.mcq_format.read_mioh_questions`), each worded by its prompt; the ``solution`` is the letter.
    Images are relative to ``image_root``, else to the folder the builder's manifest records (``veritune build
    mioh-rft``: :func:`eval_hooks.paths.recorded_image_root`), else to the file's folder."""
    root = Path(image_root) if image_root else recorded_image_root(Path(path))
    try:
        questions = read_mioh_questions(Path(path), root)
    except UserError as err:
        raise UserError(f"multi_image_path: {err}") from None
    return [
        {
            "id": f"multi/{question.id}",
            "question": question.prompt,
            "solution": question.answer,
            "options": question.options,
            "image_paths": [str(image) for image in question.images],
        }
        for question in questions
    ]


def _image_problem(path: Path) -> str | None:
    if not path.is_file():
        return "missing"
    try:
        with Image.open(path) as image:
            image.load()
    except Exception as err:  # noqa: BLE001 - any decoder failure means the image is unusable
        return f"unreadable ({type(err).__name__})"
    return None


def build_prompt(question: str, template: str) -> list[dict[str, Any]]:
    """A one-turn conversational prompt holding the templated question. TRL's GRPOTrainer puts the
    row's ``image`` before the text of the first user turn."""
    return [{"role": "user", "content": template.format(question=question)}]


def prompt_length(processor: Any, prompt: list[dict[str, Any]], image: Image.Image | list[Image.Image]) -> int:
    """Number of prompt tokens the model sees, image tokens included (rendered as TRL renders it)."""
    return prompt_lengths(processor, [prompt], [image])[0]


def get_oric_dataset(
    path: str | Path | None,
    image_root: str | Path | None,
    *,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
    split: str = "train",
    processor: Any | None = None,
    template: str = "oric_r1",
    max_pixels: int = 1280 * 28 * 28,
    max_prompt_length: int | None = 1024,
    skip_bad_examples: bool = False,
    max_samples: int | None = None,
    seed: int = 0,
    replay_path: str | Path | None = None,
    replay_ratio: float = 1.0,
    multi_image_path: str | Path | None = None,
    multi_image_root: str | Path | None = None,
    multi_image_ratio: float = 1.0,
    max_pixels_per_image: int | None = None,
) -> tuple[Dataset, DataReport]:
    """Prepare an ORIC-format file for TRL's GRPOTrainer.

    Every image is opened before training starts: missing or unreadable ones stop with an error that
    lists the first bad rows and the count, unless ``skip_bad_examples`` drops them. Prompts longer than
    ``max_prompt_length`` tokens (image tokens included; needs ``processor``) are dropped and counted.
    ``max_samples`` keeps at most that many records, drawn uniformly at random with ``seed`` (in file order),
    before the images are checked. ``replay_path`` (a POPE-layout file, images under ``image_root``) adds
    ``replay_ratio`` conventional questions per ORIC question, drawn uniformly with ``seed``: see
    :func:`load_replay_records`. ``multi_image_path`` (MIOH's format, images under ``multi_image_root``)
    adds ``multi_image_ratio`` multi-image questions per ORIC question, drawn uniformly with ``seed``
    (:func:`load_multi_image_records`), each image scaled to ``image_budget(N, max_pixels, max_pixels_per_image)``.

    Returns:
        A dataset with columns ``prompt`` (conversational), ``solution`` (``yes``/``no``), ``id``,
        ``target_object``, ``image_path``, whose rows also carry the resized PIL ``image`` (added on access,
        so images are decoded lazily), and a :class:`DataReport`. With ``multi_image_path`` every row holds a
        list instead (TRL's multi-image path): ``image_paths`` and, on access, ``images``; also ``options``
        (the JSON text of a multi-image row's ``{letter: text}``, ``""`` on a yes/no row) and ``pixel_budget``.
    """
    label = source_label(path, dataset_name, dataset_config, split)
    root = Path(image_root) if image_root else (Path(path).parent if path and not dataset_name else Path.cwd())
    records = load_oric_records(path, dataset_name=dataset_name, dataset_config=dataset_config, split=split)
    records = [records[i] for i in sample_indices(len(records), max_samples, seed)]
    multi: list[dict[str, Any]] = []
    if multi_image_path:
        questions = load_multi_image_records(multi_image_path, multi_image_root)
        wanted = round(multi_image_ratio * len(records))
        if wanted > len(questions):
            raise UserError(
                f"{multi_image_path}: {len(questions)} questions, fewer than the {wanted} multi_image_ratio asks for"
            )
        multi = [questions[i] for i in sample_indices(len(questions), wanted, seed + 2)]
    if replay_path:
        replay = load_replay_records(replay_path, root)
        wanted = round(replay_ratio * len(records))
        if wanted > len(replay):
            raise UserError(f"{replay_path}: {len(replay)} questions, fewer than the {wanted} replay_ratio asks for")
        records += [replay[i] for i in sample_indices(len(replay), wanted, seed + 1)]
    report = DataReport(
        total=len(records) + len(multi),
        replayed=sum(str(r["id"]).startswith("replay/") for r in records),
        multi_image=len(multi),
    )
    extract = embedded_image_dir(path, dataset_name)
    rows = rows_with_images(records, root, resolve_template(template), label, skip_bad_examples, report, extract)
    if multi_image_path:
        rows = [
            {**{k: v for k, v in row.items() if k != "image_path"}, "image_paths": [row["image_path"]], "options": ""}
            | {"pixel_budget": max_pixels}
            for row in rows
        ]
        rows += multi_image_rows(multi, template, max_pixels, max_pixels_per_image, skip_bad_examples, report)
    if max_prompt_length is not None and processor is not None:
        rows = drop_long_prompts(rows, processor, max_pixels, max_prompt_length, report)
    report.kept = len(rows)
    if not rows:
        raise UserError(f"{label}: no usable training examples ({report.summary()})")
    return (lazy_images_dataset(rows) if multi_image_path else lazy_image_dataset(rows, max_pixels)), report


def multi_image_prompt(question: str, template: str) -> list[dict[str, Any]]:
    """The prompt of a multi-image question (MIOH's wording): under ``oric_r1`` the R1 instruction asks for the
    option's letter in the ``<SOLUTION>`` block; any other template wraps it as it wraps a yes/no question."""
    if template == "oric_r1":
        return [{"role": "user", "content": with_r1_instruction(question, R1_OPTION_INSTRUCTION)}]
    return build_prompt(question, resolve_template(template))


def _rows_whose_images_open(
    records: list[dict[str, Any]],
    row_of: Callable[[int, dict[str, Any]], dict[str, Any] | str],
    skip_bad_examples: bool,
    source: str | Path,
    noun: str,
    fix: str,
    progress: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows ``row_of(index, record)`` builds, and the bad images it names instead (a string) for the others;
    a bad image stops, in one line naming ``source`` and the first three, unless ``skip_bad_examples``."""
    bad: list[str] = []
    rows = []
    for index, record in enumerate(tqdm(records, desc="checking images", unit="img", disable=not progress)):
        row = row_of(index, record)
        if isinstance(row, str):
            bad.append(row)
        else:
            rows.append(row)
    if bad and not skip_bad_examples:
        raise UserError(
            f"{source}: {len(bad)} {noun}(s) with missing or unreadable images, first: {'; '.join(bad[:3])} "
            f"(fix {fix} or set skip_bad_examples: true)"
        )
    return rows, bad


def multi_image_rows(
    records: list[dict[str, Any]],
    template: str,
    max_pixels: int,
    max_pixels_per_image: int | None,
    skip_bad_examples: bool,
    report: DataReport,
) -> list[dict[str, Any]]:
    """The training rows of the multi-image questions whose images all open; a bad image stops, unless
    ``skip_bad_examples`` (then the row is dropped and listed with the others)."""

    def row_of(_: int, record: dict[str, Any]) -> dict[str, Any] | str:
        problems = [(image, _image_problem(Path(image))) for image in record["image_paths"]]
        problems = [(image, problem) for image, problem in problems if problem]
        if problems:
            return f"multi-image question {record['id']}: {problems[0][0]} {problems[0][1]}"
        return {
            "prompt": multi_image_prompt(record["question"], template),
            "solution": record["solution"],
            "id": str(record["id"]),
            "target_object": "",
            "image_paths": record["image_paths"],
            "options": json.dumps(record["options"]),
            "pixel_budget": image_budget(len(record["image_paths"]), max_pixels, max_pixels_per_image),
        }

    rows, bad = _rows_whose_images_open(
        records, row_of, skip_bad_examples, "multi_image_path", "question", "multi_image_root"
    )
    report.dropped_bad_image += bad
    return rows


def rows_with_images(
    records: list[dict[str, Any]],
    root: Path,
    template_text: str,
    path: str | Path,
    skip_bad_examples: bool,
    report: DataReport,
    extract_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """The training rows of the records whose image opens (a path under ``root``, or an embedded image written
    to ``extract_dir``); a bad image stops, unless ``skip_bad_examples``."""

    def row_of(row: int, record: dict[str, Any]) -> dict[str, Any] | str:
        found, looked_for = resolve_image(record["image"], root, extract_dir or root)
        image_path = Path(found or looked_for)
        problem = _image_problem(image_path)
        if problem:
            return f"row {row} (id {record['id']}): {image_path} {problem}"
        return {
            "prompt": build_prompt(record["question"], template_text),
            "solution": record["solution"],
            "id": str(record["id"]),
            "target_object": str(record["target_object"]),
            "image_path": str(image_path),
        }

    rows, bad = _rows_whose_images_open(
        records, row_of, skip_bad_examples, path, "example", "the image_root", progress=len(records) >= 200
    )
    report.dropped_bad_image = bad
    return rows


def drop_long_prompts(
    rows: list[dict[str, Any]], processor: Any, max_pixels: int, max_prompt_length: int, report: DataReport
) -> list[dict[str, Any]]:
    """The rows whose prompt fits in ``max_prompt_length`` tokens, image tokens included; the rest are counted.
    A multi-image row is measured with its images at its ``pixel_budget``."""

    def measure(chunk: list[dict[str, Any]]) -> list[int]:
        images: list[Image.Image | list[Image.Image]] = [
            [load_image(p, row["pixel_budget"]) for p in row["image_paths"]]
            if "image_paths" in row
            else load_image(row["image_path"], max_pixels)
            for row in chunk
        ]
        return prompt_lengths(processor, [row["prompt"] for row in chunk], images)

    kept, _ = rows_within(rows, measure, max_prompt_length, "measuring prompts")
    report.dropped_too_long = len(rows) - len(kept)
    return [rows[i] for i in kept]


def lazy_image_dataset(rows: list[dict[str, Any]], max_pixels: int) -> Dataset:
    """A dataset of ``rows`` whose ``image`` (resized to ``max_pixels``) is decoded on access."""

    def attach_images(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch["image"] = [load_image(p, max_pixels) for p in batch["image_path"]]
        return batch

    dataset = Dataset.from_list(rows)
    dataset.set_transform(attach_images)
    return dataset


def lazy_images_dataset(rows: list[dict[str, Any]]) -> Dataset:
    """A dataset of ``rows`` whose ``images`` (each scaled to its row's ``pixel_budget``) are decoded on access:
    the ``images`` column TRL's GRPOTrainer places before the prompt's text, one placeholder per image."""

    def attach_images(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch["images"] = [
            [load_image(p, budget) for p in paths]
            for paths, budget in zip(batch["image_paths"], batch["pixel_budget"], strict=True)
        ]
        return batch

    dataset = Dataset.from_list(rows)
    dataset.set_transform(attach_images)
    return dataset
