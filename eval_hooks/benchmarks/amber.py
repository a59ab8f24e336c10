"""AMBER discriminative (official ``query/query_discriminative*.json`` and ``annotations.json``).

Scored as the official ``inference.py`` scores it: the ground truth of question ``id`` is the
annotation at position ``id - 1``; answers are parsed by :func:`rewards.graders.amber_yes_no`; "no" is
the positive class; accuracy, precision, recall and F1 start from the official 0.001 denominators; per
type: existence (``discriminative-hallucination``), attribute state / number / action, relation. The
generative task is ``amber_generative.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval_hooks.base import Benchmark, EvalItem
from rewards.graders import amber_yes_no
from veritune.errors import UserError
from veritune.io import read_json

TYPES = {
    "discriminative-hallucination": "existence",
    "discriminative-attribute-state": "attribute_state",
    "discriminative-attribute-number": "attribute_number",
    "discriminative-attribute-action": "attribute_action",
    "discriminative-relation": "relation",
}
EPSILON = 0.001  # the official counters start here (metrics.txt)


def _find_annotations(query_file: Path) -> Path:
    for candidate in (query_file.parent / "annotations.json", query_file.parent.parent / "annotations.json"):
        if candidate.is_file():
            return candidate
    raise UserError(f"{query_file}: AMBER's annotations.json not found beside it or one folder up")


class AmberDiscriminative(Benchmark):
    name = "amber_discriminative"
    default_max_new_tokens = 16
    data_layout = "amber/query/query_discriminative.json + amber/annotations.json (official), images in amber/image/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "amber" / "query" / "query_discriminative.json", data_root / "amber" / "image"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        queries = read_json(data_path, what="AMBER query file")
        annotations = read_json(_find_annotations(data_path), what="AMBER annotations")
        root = Path(image_root) if image_root else data_path.parent
        items = []
        for row, query in enumerate(queries if isinstance(queries, list) else []):
            if not isinstance(query, dict) or not {"id", "image", "query"} <= query.keys():
                raise UserError(f"{data_path}: row {row}: expected AMBER fields id, image, query")
            truth = annotations[query["id"] - 1] if 0 < query["id"] <= len(annotations) else None
            if not isinstance(truth, dict) or "truth" not in truth:
                raise UserError(f"{data_path}: row {row}: id {query['id']} has no discriminative annotation")
            image = root / query["image"]
            items.append(EvalItem(id=str(query["id"]), prompt=query["query"], images=[image], max_new_tokens=self.default_max_new_tokens,
                                  meta={"truth": truth["truth"], "type": TYPES.get(truth["type"], "relation")},
                                  missing_images=[] if image.is_file() else [image]))  # fmt: skip
        if not items:
            raise UserError(f"{data_path}: expected a JSON list of AMBER queries (id, image, query)")
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        groups = {"all": items}
        for name in TYPES.values():
            groups[name] = [item for item in items if item.meta["type"] == name]
        metrics: dict[str, float] = {}
        table = []
        for group, members in groups.items():
            correct = no_right = answered_no_right = 0
            total = truth_no = answered_no = EPSILON
            for item in members:
                answer = None if item.missing_images else amber_yes_no(predictions.get(item.id))
                total += 1
                correct += answer == item.meta["truth"]
                if item.meta["truth"] == "no":
                    truth_no += 1
                    no_right += answer == "no"
                if answer == "no":
                    answered_no += 1
                    answered_no_right += item.meta["truth"] == "no"
            precision, recall = answered_no_right / answered_no, no_right / truth_no
            values = {"accuracy": 100 * correct / total, "precision": 100 * precision, "recall": 100 * recall,
                      "f1": 100 * (2 * precision * recall / (precision + recall) if precision + recall else 0.0)}  # fmt: skip
            if members or group == "all":
                table.append({"type": group, "questions": len(members), **values})
                metrics.update(values if group == "all" else {f"{group}/{k}": v for k, v in values.items()})
        return {"metrics": metrics, "tables": {"by_type": table},
                "counts": {"items": len(items), "missing_images": sum(bool(i.missing_images) for i in items)}}  # fmt: skip
