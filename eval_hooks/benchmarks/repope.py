"""RePOPE: POPE's questions with corrected labels and the ambiguous items removed (YanNeu/RePOPE).

Release layout: ``annotations/coco_repope_{random,popular,adversarial}.json``, POPE's JSON-lines format
(``question_id``, ``image``, ``text``, ``label``), beside the original ``coco_pope_*.json`` files; images
are COCO val2014. The prompt is POPE's question as released.

Scored as RePOPE's ``src/eval_utils.py`` scores both POPE and RePOPE (``compute_answer`` and
``compute_results``): an answer is "yes" when its lower-cased text contains the substring "yes", else
"no" when it contains "no" (or "not"), else unparsed; per subset, TP/FP/TN/FN count only parsed answers
(an unparsed answer is in no cell and so in no denominator), and accuracy, precision, recall, F1 (yes is
the positive class) and the yes-ratio of the predictions follow, in percent (the official script prints
fractions; x 100 is the only difference). Deviations: ratios with an empty
denominator are 0.0 (the official script divides by zero); the averages over the subsets are veritune's
headline (the official script prints each subset); an item whose image is missing is counted as a wrong
answer (never correct).

Which items changed: when the POPE file of a subset lies beside the RePOPE file (``coco_pope_<subset>.json``,
as in the RePOPE repository), every POPE question RePOPE removed or relabelled is listed in the
``changes`` table, counted per subset, and the same predictions are also scored on the original POPE
labels of the kept items (``pope_labels/...``) so the effect of the relabelling is visible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.pope_format import SUBSETS, read_pope_file
from eval_hooks.answers import substring_yes_no
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.metrics import f1, ratio


def confusion_metrics(labels: list[str], answers: list[str | None]) -> dict[str, float]:
    """RePOPE's ``compute_results`` for one subset: unparsed answers are in no cell."""
    tp = sum(a == "yes" and t == "yes" for t, a in zip(labels, answers))
    fp = sum(a == "yes" and t == "no" for t, a in zip(labels, answers))
    tn = sum(a == "no" and t == "no" for t, a in zip(labels, answers))
    fn = sum(a == "no" and t == "yes" for t, a in zip(labels, answers))
    precision, recall = 100 * ratio(tp, tp + fp), 100 * ratio(tp, tp + fn)
    parsed = tp + fp + tn + fn
    return {  # in percent, as every veritune scorer (the official script prints fractions)
        "accuracy": 100 * ratio(tp + tn, parsed),
        "precision": precision,
        "recall": recall,
        "f1": f1(precision, recall),
        "yes_ratio": 100 * ratio(tp + fp, parsed),
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
        "unparsed": len(labels) - parsed,
    }


class RePope(Benchmark):
    name = "repope"
    limit_strata = ("subset",)
    default_max_new_tokens = 16
    answer_format = ""  # the official substring parse decides every answer
    data_layout = (
        "repope/annotations/coco_repope_{random,popular,adversarial}.json (+ coco_pope_*.json to list changes), "
        "images in coco/val2014/"
    )

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "repope" / "annotations", data_root / "coco" / "val2014"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        if data_path.is_dir():
            files = [
                data_path / f"coco_repope_{s}.json" for s in SUBSETS if (data_path / f"coco_repope_{s}.json").is_file()
            ]
            if not files:
                raise UserError(f"{data_path}: no coco_repope_{{random,popular,adversarial}}.json in this folder")
        else:
            files = [data_path]
        root = Path(image_root) if image_root else (data_path if data_path.is_dir() else data_path.parent)
        items = []
        for file in files:
            subset = next((s for s in SUBSETS if s in file.name), file.stem)
            pope_file = file.parent / f"coco_pope_{subset}.json"
            pope = (
                {str(r["question_id"]): r for r in read_pope_file(pope_file)}
                if pope_file.is_file() and pope_file != file
                else None
            )
            kept = set()
            for record in read_pope_file(file, "RePOPE file"):
                qid = str(record["question_id"])
                kept.add(qid)
                image = root / record["image"]
                meta: dict[str, Any] = {"label": record["label"], "subset": subset}
                if pope is not None:
                    meta["pope_label"] = pope[qid]["label"] if qid in pope else None
                items.append(self.image_item(f"{subset}/{qid}", record["text"], image, meta))
            if pope is not None:  # removed POPE questions ride along on the subset's first item, for the change list
                removed = [
                    {"question_id": qid, "text": r["text"], "pope_label": r["label"]}
                    for qid, r in pope.items()
                    if qid not in kept
                ]
                first = next((item for item in items if item.meta["subset"] == subset), None)
                if first is not None:
                    first.meta["removed"] = removed
                    first.meta["pope_questions"] = len(pope)
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        metrics: dict[str, float] = {}
        table, changes = [], []
        counts: dict[str, Any] = {"items": len(items), "missing_images": sum(bool(i.missing_images) for i in items)}
        subsets = list(dict.fromkeys(item.meta["subset"] for item in items))
        with_pope = bool(items) and all("pope_label" in item.meta for item in items)
        pope_rows = []
        for subset in subsets:
            group = [item for item in items if item.meta["subset"] == subset]
            answers = [self._answer(item, predictions) for item in group]
            values = confusion_metrics([item.meta["label"] for item in group], answers)
            table.append({"subset": subset, **values})
            metrics.update({f"{subset}/{k}": values[k] for k in ("accuracy", "precision", "recall", "f1", "yes_ratio")})
            if with_pope:
                kept = [(item, answer) for item, answer in zip(group, answers) if item.meta["pope_label"] is not None]
                original = confusion_metrics(
                    [item.meta["pope_label"] for item, _ in kept], [answer for _, answer in kept]
                )
                pope_rows.append({"subset": subset, **original})
                metrics.update(
                    {f"pope_labels/{subset}/{k}": original[k] for k in ("accuracy", "precision", "recall", "f1")}
                )
                flipped = [item for item in group if item.meta["pope_label"] not in (None, item.meta["label"])]
                removed = group[0].meta.get("removed", [])
                changes += [
                    {
                        "subset": subset,
                        "question_id": item.id.split("/", 1)[1],
                        "change": f"{item.meta['pope_label']} -> {item.meta['label']}",
                        "text": item.prompt,
                    }
                    for item in flipped
                ]
                changes += [
                    {
                        "subset": subset,
                        "question_id": r["question_id"],
                        "change": f"removed (was {r['pope_label']})",
                        "text": r["text"],
                    }
                    for r in removed
                ]
                counts[f"{subset}/relabelled_yes_to_no"] = sum(item.meta["pope_label"] == "yes" for item in flipped)
                counts[f"{subset}/relabelled_no_to_yes"] = sum(item.meta["pope_label"] == "no" for item in flipped)
                counts[f"{subset}/removed"] = len(removed)
        for key in ("accuracy", "precision", "recall", "f1", "yes_ratio"):
            metrics[key] = sum(row[key] for row in table) / len(table) if table else 0.0
        if pope_rows:
            for key in ("accuracy", "precision", "recall", "f1"):
                metrics[f"pope_labels/{key}"] = sum(row[key] for row in pope_rows) / len(pope_rows)
        counts["unparsed"] = sum(row["unparsed"] for row in table)
        tables: dict[str, Any] = {"per_subset": table}
        if with_pope:
            tables["pope_labels_per_subset"] = pope_rows
            tables["changes"] = changes
        return {"metrics": metrics, "tables": tables, "counts": counts}

    def item_correct(self, item: EvalItem, prediction: str) -> bool:
        """The official substring parse's answer equals the (RePOPE) label; unparsed is never correct."""
        return self._answer(item, {item.id: prediction}) == item.meta["label"]

    @staticmethod
    def _answer(item: EvalItem, predictions: dict[str, str]) -> str | None:
        if item.missing_images:  # never correct: the opposite of the label
            return "no" if item.meta["label"] == "yes" else "yes"
        return substring_yes_no(predictions.get(item.id, ""), not_means_no=True)
