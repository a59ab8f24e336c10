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

from core.mcq_format import MIOH_PATTERNS, MIOH_PRESSURES, MIOH_TASKS, mioh_prompt, read_mioh_questions
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.mcq import accuracy_table, grade_letters, resolution_shares

__all__ = ["Mioh", "mioh_prompt"]

TASKS, PATTERNS, PRESSURES = MIOH_TASKS, MIOH_PATTERNS, MIOH_PRESSURES


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
        return [
            EvalItem(
                id=question.id,
                prompt=question.prompt,
                images=question.images,
                max_new_tokens=self.default_max_new_tokens,
                meta={
                    "options": question.options,
                    "answer": question.answer,
                    "task": question.task,
                    "pattern": question.pattern,
                    "pressure": question.pressure,
                    "num_images": question.num_images,
                },
                missing_images=[p for p in question.images if not p.is_file()],
            )
            for question in read_mioh_questions(data_path, image_root)
        ]

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
