"""ORBIT, object-property counting (arXiv 2508.10956; official
``benchmark.json`` and scoring code ``utils.py`` of the public ORBIT repository, AbhishekKolari/ORBIT).

Layout: ``{"benchmark": {"question_types": {"Q1": "direct_recognition", ...}, "images": [{"image_id",
"image_type", "path", "questions": [{"id": "Q1".."Q3", "question", "answer", "property_category"}]}]}}``;
image paths are relative to the image root (the repository root in the official release). Image ids
repeat across image types (``image01`` is a REAL, an ANIMATED and an AI_GENERATED image), so an item id
is ``<image_type>/<image_id>/<question id>``, e.g. ``REAL/image01/Q1``.

Prompt: the official one of ``utils.py`` (its Qwen2.5-VL / generic branch), the question followed by
" Your response MUST be in the following format and nothing else:\n <NUMBER> [<OBJECT1>, <OBJECT2>,
<OBJECT3>, ...]"; greedy, 200 new tokens, as there.

Answer extraction: the shared count grader :func:`rewards.graders.extract_count`, which is the official
``clean_answer_improved`` rule for rule (quirks included: a standalone "I" reads as 1); an answer it
cannot read is a prediction of 0, as officially. Counts above ten are reported (``invalid_above_10``)
and can never equal a true count.

Metrics, as ``utils.py`` computes them on the parsed counts (percent where a share): micro accuracy
(exact count); macro accuracy (the mean of the per-count accuracies over the true counts 0..10 present,
the paper's Table 2); RMSE and mean error (prediction minus truth: negative means undercounting) over
every item; off-by-1 accuracy (|prediction - truth| <= 1, every prediction, "11" for a true 10 included);
and the same by reasoning level, property dimension and image type. Rescoring the released
Qwen2.5-VL-7B results reproduces Table 2 (38.70 / 31.57 / 1.88 / -0.62 / 70.28).
Deviation: an item whose image is missing is never generated, counts as wrong in the shares and is left
out of RMSE and mean error (the official code skips such an image altogether).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from eval_hooks.answers import extract_count
from eval_hooks.base import Benchmark, EvalItem

MAX_COUNT = 10
LEVELS = {"Q1": "direct_recognition", "Q2": "property_inference", "Q3": "counterfactual_reasoning"}
PROMPT = (
    "{question} Your response MUST be in the following format and nothing else:\n"
    " <NUMBER> [<OBJECT1>, <OBJECT2>, <OBJECT3>, ...]"
)


def count_metrics(pairs: list[tuple[int | None, int]]) -> dict[str, float]:
    """``(predicted, truth)`` pairs -> accuracy, macro accuracy, RMSE, mean error, off-by-1 (percent for
    the shares). ``None`` (an item whose image is missing) is wrong and left out of the error metrics."""
    if not pairs:
        return {"accuracy": 0.0, "macro_accuracy": 0.0, "rmse": 0.0, "mean_error": 0.0, "off_by_1": 0.0}

    def right(predicted: int | None, truth: int, tolerance: int = 0) -> bool:
        return predicted is not None and abs(predicted - truth) <= tolerance

    by_truth: dict[int, list[bool]] = defaultdict(list)
    for predicted, truth in pairs:
        by_truth[truth].append(right(predicted, truth))
    errors = [p - t for p, t in pairs if p is not None]
    return {
        "accuracy": 100 * sum(right(p, t) for p, t in pairs) / len(pairs),
        "macro_accuracy": 100 * sum(sum(flags) / len(flags) for flags in by_truth.values()) / len(by_truth),
        "rmse": math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0,
        "mean_error": sum(errors) / len(errors) if errors else 0.0,
        "off_by_1": 100 * sum(right(p, t, 1) for p, t in pairs) / len(pairs),
    }


class Orbit(Benchmark):
    name = "orbit"
    default_max_new_tokens = 200
    answer_format = "count"
    data_layout = "orbit/benchmark.json (official), image paths in it relative to orbit/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "orbit" / "benchmark.json", data_root / "orbit"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data = read_json(data_path, what="ORBIT benchmark file")
        bench = data.get("benchmark") if isinstance(data, dict) else None
        if not isinstance(bench, dict) or not isinstance(bench.get("images"), list):
            raise UserError(
                f"{data_path}: expected ORBIT's layout "
                "{'benchmark': {'images': [{image_id, image_type, path, questions}]}}"
            )
        levels = {**LEVELS, **(bench.get("question_types") or {})}
        root = Path(image_root) if image_root else Path(data_path).parent
        items = []
        for row, record in enumerate(bench["images"]):
            missing = [
                f
                for f in ("image_id", "image_type", "path", "questions")
                if not isinstance(record, dict) or f not in record
            ]
            if missing:
                raise UserError(f"{data_path}: images[{row}]: missing field '{missing[0]}'")
            image = root / record["path"]
            for number, question in enumerate(record["questions"]):
                absent = [
                    f for f in ("id", "question", "answer") if not isinstance(question, dict) or f not in question
                ]
                if absent:
                    raise UserError(f"{data_path}: images[{row}].questions[{number}]: missing field '{absent[0]}'")
                try:
                    truth = int(str(question["answer"]).strip())
                except ValueError:
                    raise UserError(
                        f"{data_path}: images[{row}].questions[{number}]: answer {question['answer']!r} is not a count"
                    ) from None
                items.append(
                    self.image_item(
                        f"{record['image_type']}/{record['image_id']}/{question['id']}",
                        PROMPT.format(question=question["question"]),
                        image,
                        {
                            "answer": truth,
                            "level": levels.get(question["id"], str(question["id"])),
                            "property": question.get("property_category", "unknown"),
                            "image_type": record["image_type"],
                        },
                    )
                )
        if not items:
            raise UserError(f"{data_path}: no ORBIT question found")
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        predicted: dict[str, int | None] = {}
        resolution: Counter[str] = Counter()
        invalid = 0
        for item in items:
            if item.missing_images:  # never correct, and no error to measure
                resolution["missing_image"] += 1
                predicted[item.id] = None
                continue
            count, rule = extract_count(predictions.get(item.id))
            resolution[rule if item.id in predictions else "no_prediction"] += 1
            predicted[item.id] = 0 if count is None else count  # a missing count is a prediction of 0
            invalid += count is not None and count > MAX_COUNT
        metrics = count_metrics([(predicted[i.id], i.meta["answer"]) for i in items])
        tables: dict[str, list[dict[str, Any]]] = {}
        for dimension in ("level", "property", "image_type"):
            rows = []
            for value in dict.fromkeys(i.meta[dimension] for i in items):
                members = [i for i in items if i.meta[dimension] == value]
                values = count_metrics([(predicted[i.id], i.meta["answer"]) for i in members])
                rows.append({dimension: value, "questions": len(members), **values})
                metrics[f"{dimension}/{value}/accuracy"] = values["accuracy"]
            tables[f"by_{dimension}"] = rows
        per_count = defaultdict(list)
        for item in items:
            per_count[item.meta["answer"]].append(predicted[item.id] == item.meta["answer"])
        tables["by_count"] = [
            {"count": c, "questions": len(f), "accuracy": 100 * sum(f) / len(f)} for c, f in sorted(per_count.items())
        ]
        total = len(items) or 1
        metrics.update({f"resolved/{rule}": 100 * n / total for rule, n in sorted(resolution.items())})
        metrics["invalid_share"] = 100 * invalid / total
        counts = {
            "items": len(items),
            "invalid_above_10": invalid,
            "missing_images": resolution["missing_image"],
            "unresolved_scored_as_0": resolution["unresolved"],
        }
        return {"metrics": metrics, "tables": tables, "counts": counts, "lower_is_better": ["rmse"]}
