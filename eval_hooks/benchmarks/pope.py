"""POPE (official JSON-lines files ``coco_pope_{random,popular,adversarial}.json``: ``question_id``,
``image``, ``text``, ``label``). Scored as the official ``evaluate.py`` (AoiDragon/POPE) scores it, with the
grader :func:`pope_yes_no` below (that script's rule, not the shared free-form one): keep the answer's
first sentence, drop commas, split on spaces; "no" when a word is "No", "not" or "no", else "yes";
accuracy, precision, recall and F1 with "yes" as the positive class, and the yes-ratio of the
*predictions* (not of the ground truth). Reported in percent, like every veritune scorer: the official
script prints the same numbers as fractions (x 100 is the only difference)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.metrics import f1, ratio
from rewards.graders import YesNo, completion_text

SUBSETS = ("random", "popular", "adversarial")
FIELDS = ("question_id", "image", "text", "label")


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


class Pope(Benchmark):
    name = "pope"
    limit_strata = ("subset",)  # random, popular, adversarial
    default_max_new_tokens = 16
    data_layout = "pope/coco_pope_{random,popular,adversarial}.json (official), images in coco/val2014/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "pope", data_root / "coco" / "val2014"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        files = [data_path / f"coco_pope_{s}.json" for s in SUBSETS] if data_path.is_dir() else [data_path]
        files = [f for f in files if f.is_file()] or files[:1]
        root = Path(image_root) if image_root else data_path if data_path.is_dir() else data_path.parent
        items = []
        for file in files:
            subset = next((s for s in SUBSETS if s in file.name), file.stem)
            for record in read_pope_file(file):
                image = root / record["image"]
                items.append(
                    self.image_item(
                        f"{subset}/{record['question_id']}",
                        record["text"],
                        image,
                        {"label": record["label"], "subset": subset},
                    )
                )
        return items

    def item_correct(self, item: EvalItem, prediction: str) -> bool:
        """The official rule's answer equals the label (an item with a missing image is never correct)."""
        return not item.missing_images and pope_yes_no(prediction) == item.meta["label"]

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        metrics: dict[str, float] = {}
        table = []
        missing = 0
        for subset in sorted(
            {item.meta["subset"] for item in items},
            key=lambda s: (s not in SUBSETS, SUBSETS.index(s) if s in SUBSETS else 0),
        ):
            group = [item for item in items if item.meta["subset"] == subset]
            tp = fp = tn = fn = 0
            for item in group:
                if item.missing_images:  # never scored as correct
                    missing += 1
                    answer = "no" if item.meta["label"] == "yes" else "yes"
                else:
                    answer = pope_yes_no(predictions.get(item.id, ""))
                positive, truth = answer == "yes", item.meta["label"] == "yes"
                tp += positive and truth
                fp += positive and not truth
                tn += not positive and not truth
                fn += not positive and truth
            precision, recall = 100 * ratio(tp, tp + fp), 100 * ratio(tp, tp + fn)
            values = {  # in percent, as every veritune scorer (the official script prints fractions)
                "accuracy": 100 * ratio(tp + tn, len(group)),
                "precision": precision,
                "recall": recall,
                "f1": f1(precision, recall),
                "yes_ratio": 100 * ratio(tp + fp, len(group)),
            }
            table.append({"subset": subset, **values, "tp": tp, "fp": fp, "tn": tn, "fn": fn})
            metrics.update({f"{subset}/{k}": v for k, v in values.items()})
        for key in ("accuracy", "precision", "recall", "f1", "yes_ratio"):
            metrics[key] = sum(row[key] for row in table) / len(table) if table else 0.0
        return {
            "metrics": metrics,
            "tables": {"per_subset": table},
            "counts": {"items": len(items), "missing_images": missing},
        }


# ---- POPE's official answer parsing


def pope_yes_no(text: Any) -> YesNo:
    """POPE's official parsing rule: keep the text before the first period, drop commas, split into
    words; the answer is "no" when a word is "No", "not" or "no", otherwise "yes".

    Unlike :func:`rewards.graders.extract_yes_no` this never abstains: POPE counts every unparsable answer as "yes".
    """
    return _pope_yes_no_text(completion_text(text) or "")


@lru_cache(maxsize=65536)
def _pope_yes_no_text(text: str) -> YesNo:
    first_sentence = text[:MAX_SCAN_CHARS].split(".")[0].replace(",", "")
    words = first_sentence.split(" ")  # split on spaces only, as the official script does
    return "no" if any(w in ("No", "not", "no") for w in words) else "yes"
