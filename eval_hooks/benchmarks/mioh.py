"""MIOH, multi-image object hallucination ("Fine-Grained Multi-Image Object Hallucination Benchmark", CVPR 2026).

MIOH publishes no file format in the paper, so veritune reads one JSON list (or JSON lines) of records,
one per question, holding what the paper's Table 1 and Fig. 2 show for each question:

    {"id": "ex-cmp-0001", "images": ["a.jpg", "b.jpg"], "question": "Which object appears in all images?",
     "options": {"A": "tv", "B": "toothbrush", "C": "dog", "D": "sheep", "E": "None of the above"},
     "answer": "C", "task": "existence", "pattern": "comprehensive", "pressure": "easy"}

``options`` may also be a list (lettered A, B, ... in order); ``task`` is existence / counting /
attribute / position, ``pattern`` comprehensive / comparative / selective, ``pressure`` easy /
hard_negative / hard_positive / num_images (the NI variants, which also carry ``num_images``).

Prompt: the images in order (the text names them Image 1, Image 2, ...), the question, the lettered
options, and a request for the letter alone; greedy (the paper decodes at temperature 0). The letter
comes from the shared option grader.

Metrics, as Table 2 aggregates them: accuracy per task and pressure; a task's average is the mean of its
pressure accuracies; the overall average is the mean of the task averages. Also accuracy per task and
reasoning pattern (the Fig. 3 heat map), per number of images, and the plain accuracy over all questions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.mcq import accuracy_table, grade_letters, letter_list, lettered, option_block, resolution_shares

FIELDS = ("id", "images", "question", "options", "answer", "task", "pattern", "pressure")
TASKS = ("existence", "counting", "attribute", "position")
PATTERNS = ("comprehensive", "comparative", "selective")
PRESSURES = ("easy", "hard_negative", "hard_positive", "num_images")


def mioh_prompt(question: str, options: dict[str, str], num_images: int) -> str:
    names = ", ".join(f"Image {i}" for i in range(1, num_images + 1))
    return (
        f"The images above are, in order, {names}.\n{question}\n{option_block(options)}\n"
        f"Answer with the letter of the correct option ({letter_list(options)}) only."
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class Mioh(Benchmark):
    name = "mioh"
    limit_strata = ("task",)
    answer_format = "option"
    default_max_new_tokens = 8
    data_layout = (
        "mioh/mioh.json (records: id, images, question, options, answer, task, pattern, pressure), "
        "images in mioh/images/"
    )

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "mioh" / "mioh.json", data_root / "mioh" / "images"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        records = read_json_or_jsonl(data_path, what="MIOH file")
        root = Path(image_root) if image_root else Path(data_path).parent
        items = []
        for row, record in enumerate(records):
            missing = [f for f in FIELDS if not isinstance(record, dict) or f not in record]
            if missing:
                raise UserError(
                    f"{data_path}: row {row}: missing field '{missing[0]}' (MIOH records have {', '.join(FIELDS)})"
                )
            raw = record["options"]
            options = (
                {str(k).strip().upper(): str(v) for k, v in raw.items()} if isinstance(raw, dict) else lettered(raw)
            )
            answer = str(record["answer"]).strip().upper()
            if answer not in options:
                raise UserError(
                    f"{data_path}: row {row}: answer {record['answer']!r} "
                    f"is not one of the options {', '.join(options)}"
                )
            for field, allowed in (("task", TASKS), ("pattern", PATTERNS), ("pressure", PRESSURES)):
                if record[field] not in allowed:
                    raise UserError(
                        f"{data_path}: row {row}: {field} {record[field]!r} is not one of {', '.join(allowed)}"
                    )
            if not isinstance(record["images"], list) or not record["images"]:
                raise UserError(f"{data_path}: row {row}: images must be a non-empty list of paths")
            images = [root / str(path) for path in record["images"]]
            items.append(
                EvalItem(
                    id=str(record["id"]),
                    prompt=mioh_prompt(str(record["question"]), options, len(images)),
                    images=images,
                    max_new_tokens=self.default_max_new_tokens,
                    meta={
                        "options": options,
                        "answer": answer,
                        "task": record["task"],
                        "pattern": record["pattern"],
                        "pressure": record["pressure"],
                        "num_images": int(record.get("num_images") or len(images)),
                    },
                    missing_images=[p for p in images if not p.is_file()],
                )
            )
        if not items:
            raise UserError(f"{data_path}: no MIOH question found")
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct, resolution = grade_letters(items, predictions)
        metrics: dict[str, float] = {"accuracy": 100 * sum(correct.values()) / len(correct) if correct else 0.0}
        task_pressure = accuracy_table(items, correct, lambda i: (i.meta["task"], i.meta["pressure"]), "cell")
        cells = {row["cell"]: row["accuracy"] for row in task_pressure}
        task_averages = []
        for task in TASKS:
            present = [cells[(task, p)] for p in PRESSURES if (task, p) in cells]
            for pressure in PRESSURES:
                if (task, pressure) in cells:
                    metrics[f"{task}/{pressure}"] = cells[(task, pressure)]
            if present:
                metrics[f"{task}/average"] = _mean(present)
                task_averages.append(metrics[f"{task}/average"])
        metrics["overall_average"] = _mean(task_averages)
        task_pattern = accuracy_table(items, correct, lambda i: (i.meta["task"], i.meta["pattern"]), "cell")
        for row in task_pattern:
            metrics[f"{row['cell'][0]}/{row['cell'][1]}"] = row["accuracy"]
        for row in accuracy_table(items, correct, lambda i: i.meta["pattern"], "pattern"):
            metrics[f"pattern/{row['pattern']}"] = row["accuracy"]
        metrics.update(resolution_shares(resolution))
        tables = {
            "task_by_pressure": [
                {"task": r["cell"][0], "pressure": r["cell"][1], "questions": r["questions"], "accuracy": r["accuracy"]}
                for r in task_pressure
            ],
            "task_by_pattern": [
                {"task": r["cell"][0], "pattern": r["cell"][1], "questions": r["questions"], "accuracy": r["accuracy"]}
                for r in task_pattern
            ],
            "by_num_images": sorted(
                accuracy_table(items, correct, lambda i: i.meta["num_images"], "num_images"),
                key=lambda r: r["num_images"],
            ),
        }
        counts = {
            "items": len(items),
            "missing_images": resolution["missing_image"],
            "unresolved": resolution["unresolved"],
        }
        return {"metrics": metrics, "tables": tables, "counts": counts}
