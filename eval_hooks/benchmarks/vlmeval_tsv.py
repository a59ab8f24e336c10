"""Any suite in VLMEvalKit's Y/N or VQA TSV layout: ``--data tsv_yn=FILE.tsv`` / ``--data tsv_vqa=FILE.tsv``.

Both layouts share the MCQ layout's ``index``, ``image`` (base64, or the ``index`` of the row whose image it
reuses) / ``image_path`` and ``question`` columns (read by :func:`eval_hooks.benchmarks.mcq_tsv.read_vlmeval_tsv`),
with optional ``category`` and ``l2-category``:

- **Y/N** (``vlmeval/dataset/image_yorn.py``): ``answer`` is ``Yes`` or ``No``. The prompt is the question as
  it stands (VLMEvalKit adds nothing; MME's questions already end in "Please answer yes or no.").
  Scoring follows VLMEvalKit's ``default_rating`` (``vlmeval/dataset/utils/yorn.py``): the answer from
  ``YOrN_Extraction`` (:func:`rewards.graders.vlmeval_yes_no`; unresolved is wrong), accuracy overall, per
  ``category`` and per ``l2-category``.
- **VQA** (``vlmeval/dataset/image_vqa.py``): ``answer`` is one answer, or a Python list literal of the
  annotators' answers (TextVQA's ten). The prompt is the question followed by "\\nAnswer the question using
  a single word or phrase." Scoring follows ``vlmeval/dataset/utils/vqa_eval.py`` ``process_line``
  (``vqa_score``): VQA accuracy (:func:`vqa_accuracy`) over the annotators' answers after the VQA answer
  normalisation (:func:`rewards.graders.normalize_vqa_answer`); with a ``split`` column, accuracy per split
  and overall, else overall and per ``category``.

Generation budgets: VLMEvalKit leaves them to each model wrapper; veritune gives a yes/no answer 16 new
tokens and a word-or-phrase answer 32 (``--max-new-tokens`` overrides).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Any

from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.mcq_tsv import VlmevalTsv, _blank, read_vlmeval_tsv
from rewards.graders import normalize_vqa_answer, normalize_yes_no_label, vlmeval_yes_no
from veritune.core.errors import UserError

VQA_PROMPT_SUFFIX = "\nAnswer the question using a single word or phrase."


def vqa_accuracy(prediction: str | None, answers: list[str]) -> float:
    """VQA accuracy of one answer (0..1): for each annotator, ``min(1, #other annotators who gave the
    normalised prediction / 3)``, averaged over the annotators, i.e. over the ten 9-annotator subsets of
    TextVQA's ten answers (the official ``TextVQAAccuracyEvaluator`` in haotian-liu/LLaVA
    ``llava/eval/m4c_evaluator.py``, and VLMEvalKit's ``vqa_score``).

    A single reference answer has no "other" annotators, where the official formula gives 0 whatever the
    answer; veritune then scores an exact match of the normalised texts instead (1 or 0).
    """
    if prediction is None or not answers:
        return 0.0
    predicted = normalize_vqa_answer(prediction)
    references = [normalize_vqa_answer(answer) for answer in answers]
    if len(references) == 1:
        return float(references[0] == predicted)
    matches = sum(reference == predicted for reference in references)
    # leaving annotator i out removes one match when i gave the predicted answer
    per_annotator = [min(1.0, (matches - (reference == predicted)) / 3) for reference in references]
    return sum(per_annotator) / len(per_annotator)


def parse_answers(cell: Any, where: str) -> list[str]:
    """The reference answers of a VQA row: a Python list literal (``"['a', 'b']"``) or one answer."""
    text = "" if _blank(cell) else str(cell)
    if text.startswith("[") and text.endswith("]"):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, list) and value:
            return [str(answer) for answer in value]
    if not text:
        raise UserError(f"{where}: empty answer (expected an answer or a list of answers such as ['a', 'b'])")
    return [text]


def _optional(row: dict[str, Any], column: str) -> str | None:
    return None if _blank(row.get(column)) else str(row[column])


def accuracy_by(items: list[EvalItem], scores: dict[str, float], key: str) -> list[dict[str, Any]]:
    """Mean score (percent) and item count per value of ``item.meta[key]`` (items without one left out),
    sorted by value as VLMEvalKit sorts its categories."""
    groups: dict[str, list[float]] = defaultdict(list)
    for item in items:
        if item.meta.get(key) is not None:
            groups[item.meta[key]].append(scores[item.id])
    return [{key: value, "questions": len(v), "accuracy": 100 * sum(v) / len(v)} for value, v in sorted(groups.items())]


class YnTsv(VlmevalTsv):
    """Any suite in VLMEvalKit's Y/N TSV layout (see the module docstring); ``--data tsv_yn=FILE.tsv``."""

    name = "tsv_yn"
    default_max_new_tokens = 16
    answer_format = "yes_no"
    data_layout = "a VLMEvalKit Y/N .tsv (index, image (base64) or image_path, question, answer Yes/No, category)"

    def parse(self, text: str | None) -> str | None:
        """The yes/no an answer gives (the protocol's parser); None is never correct."""
        return vlmeval_yes_no(text)

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        rows, image_of = read_vlmeval_tsv(
            data_path, self.name, ("index", "question", "answer"), "Y/N", "index, image, question, answer (Yes/No)"
        )
        indices = {str(row["index"]) for row in rows}
        items = []
        for number, row in enumerate(rows, start=2):
            label = normalize_yes_no_label(str(row["answer"]))
            if label is None:
                raise UserError(f"{data_path}: line {number}: answer {row['answer']!r} is not Yes or No")
            image = image_of(number, row, image_root)
            cell = str(row.get("image") or "")
            # a reused image is keyed by the row that holds it
            source = cell if len(cell) <= 64 and cell in indices else str(row["index"])
            meta = {
                "answer": label,
                "question": str(row["question"]),
                "category": _optional(row, "category"),
                "l2_category": _optional(row, "l2-category"),
                # the image a question is asked about (MME pairs two questions per image)
                "image_key": _optional(row, "image_path") or source,
            }
            items.append(self.image_item(str(row["index"]), str(row["question"]), image, meta))
        return items

    def grade(self, items: list[EvalItem], predictions: dict[str, str]) -> tuple[dict[str, bool], int]:
        """Per item: right or wrong; and how many answered items the parser could not read."""
        correct, unresolved = {}, 0
        for item in items:
            answer = None if item.missing_images or item.id not in predictions else self.parse(predictions[item.id])
            unresolved += answer is None and item.id in predictions and not item.missing_images
            correct[item.id] = answer == item.meta["answer"]
        return correct, unresolved

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct, unresolved = self.grade(items, predictions)
        scores = {key: float(value) for key, value in correct.items()}
        metrics: dict[str, float] = {"accuracy": 100 * sum(scores.values()) / len(scores) if scores else 0.0}
        tables = {}
        for key, table in (("category", "by_category"), ("l2_category", "by_l2_category")):
            rows = accuracy_by(items, scores, key)
            if rows:
                tables[table] = rows
                metrics.update({f"{key}/{row[key]}": row["accuracy"] for row in rows})
        counts = {
            "items": len(items),
            "unresolved": unresolved,
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        return {"metrics": metrics, "tables": tables, "counts": counts}


class VqaTsv(VlmevalTsv):
    """Any suite in VLMEvalKit's VQA TSV layout (see the module docstring); ``--data tsv_vqa=FILE.tsv``."""

    name = "tsv_vqa"
    default_max_new_tokens = 32
    data_layout = (
        "a VLMEvalKit VQA .tsv (index, image (base64) or image_path, question, answer (or a list of answers)"
        "[, split, category])"
    )
    metric = "vqa_accuracy"

    def item_score(self, prediction: str | None, answers: list[str]) -> float:
        """One answer's score (0..1) against its reference answers."""
        return vqa_accuracy(prediction, answers)

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        rows, image_of = read_vlmeval_tsv(
            data_path, self.name, ("index", "question", "answer"), "VQA", "index, image, question, answer"
        )
        items = []
        for number, row in enumerate(rows, start=2):
            answers = parse_answers(row["answer"], f"{data_path}: line {number}")
            image = image_of(number, row, image_root)
            meta = {
                "answers": answers,
                "answer": answers[0],
                "question": str(row["question"]),
                "split": _optional(row, "split"),
                "category": _optional(row, "category"),
            }
            items.append(self.make_item(str(row["index"]), str(row["question"]), image, meta))
        return items

    def make_item(self, item_id: str, question: str, image: Path, meta: dict[str, Any]) -> EvalItem:
        """One item asking ``question`` with VLMEvalKit's word-or-phrase instruction."""
        return self.image_item(item_id, question + VQA_PROMPT_SUFFIX, image, meta)

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        scores = {
            item.id: 0.0 if item.missing_images else self.item_score(predictions.get(item.id), item.meta["answers"])
            for item in items
        }
        metrics: dict[str, float] = {self.metric: 100 * sum(scores.values()) / len(scores) if scores else 0.0}
        tables = {}
        group = "split" if any(item.meta.get("split") for item in items) else "category"  # as VLMEvalKit: split first
        rows = accuracy_by(items, scores, group)
        if rows:
            tables[f"by_{group}"] = [
                {**{k: v for k, v in row.items() if k != "accuracy"}, self.metric: row["accuracy"]} for row in rows
            ]
            metrics.update({f"{row[group]}/{self.metric}": row["accuracy"] for row in rows})
        counts = {
            "items": len(items),
            "missing_images": sum(bool(i.missing_images) for i in items),
            "single_answer_items": sum(len(item.meta["answers"]) == 1 for item in items),
        }
        return {"metrics": metrics, "tables": tables, "counts": counts}
