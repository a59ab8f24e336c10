"""POPE (official JSON-lines files ``coco_pope_{random,popular,adversarial}.json``: ``question_id``,
``image``, ``text``, ``label``). Scored as the official ``evaluate.py`` (AoiDragon/POPE) scores it, with the
grader :func:`pope_yes_no` below (that script's rule, not the shared free-form one): keep the answer's
first sentence, drop commas, split on spaces; "no" when a word is "No", "not" or "no", else "yes";
accuracy, precision, recall and F1 with "yes" as the positive class, and the yes-ratio of the
*predictions* (not of the ground truth). Reported in percent, like every veritune scorer: the official
script prints the same numbers as fractions (x 100 is the only difference)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.pope_format import SUBSETS, read_pope_questions
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.metrics import f1, ratio
from rewards.graders import YesNo, completion_text


class Pope(Benchmark):
    name = "pope"
    limit_strata = ("subset",)  # random, popular, adversarial
    default_max_new_tokens = 16
    data_layout = "pope/coco_pope_{random,popular,adversarial}.json (official), images in coco/val2014/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "pope", data_root / "coco" / "val2014"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        return [
            self.image_item(q.id, q.text, q.image, {"label": q.label, "subset": q.subset})
            for q in read_pope_questions(data_path, image_root)
        ]

    def item_correct(self, item: EvalItem, prediction: str) -> bool:
        """The official rule's answer equals the label (an item with a missing image is never correct)."""
        return not item.missing_images and pope_yes_no(prediction) == item.meta["label"]

    def counts(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[Hashable, int]:
        """Per subset, the official script's confusion counts ``(subset, "tp" | "fp" | "tn" | "fn")`` ("yes" the
        positive class; an item whose image is missing counted as the wrong answer), and ``missing_images``."""
        tally: Counter[Hashable] = Counter()
        for item in items:
            if item.missing_images:  # never scored as correct
                tally["missing_images"] += 1
                answer = "no" if item.meta["label"] == "yes" else "yes"
            else:
                answer = pope_yes_no(predictions.get(item.id, ""))
            positive, truth = answer == "yes", item.meta["label"] == "yes"
            cell = ("t" if positive == truth else "f") + ("p" if positive else "n")
            tally[item.meta["subset"], cell] += 1
        return dict(tally)

    def metrics_from_counts(self, counts: Mapping[Hashable, int]) -> dict[str, float]:
        return self._summary(counts)[0]

    def _summary(self, counts: Mapping[Hashable, int]) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """The metrics and the per-subset table from :meth:`counts`' tallies: each subset's metrics as the
        official script computes them, and their mean over the subsets present."""
        metrics: dict[str, float] = {}
        table = []
        present = {key[0] for key, count in counts.items() if isinstance(key, tuple) and count}
        for subset in sorted(present, key=lambda s: (s not in SUBSETS, SUBSETS.index(s) if s in SUBSETS else 0, s)):
            tp, fp, tn, fn = (counts.get((subset, cell), 0) for cell in ("tp", "fp", "tn", "fn"))
            total = tp + fp + tn + fn
            precision, recall = 100 * ratio(tp, tp + fp), 100 * ratio(tp, tp + fn)
            values = {  # in percent, as every veritune scorer (the official script prints fractions)
                "accuracy": 100 * ratio(tp + tn, total),
                "precision": precision,
                "recall": recall,
                "f1": f1(precision, recall),
                "yes_ratio": 100 * ratio(tp + fp, total),
            }
            table.append({"subset": subset, **values, "tp": tp, "fp": fp, "tn": tn, "fn": fn})
            metrics.update({f"{subset}/{k}": v for k, v in values.items()})
        for key in ("accuracy", "precision", "recall", "f1", "yes_ratio"):
            metrics[key] = sum(row[key] for row in table) / len(table) if table else 0.0
        return metrics, table

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        counts = self.counts(items, predictions)
        metrics, table = self._summary(counts)
        return {
            "metrics": metrics,
            "tables": {"per_subset": table},
            "counts": {"items": len(items), "missing_images": counts.get("missing_images", 0)},
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
