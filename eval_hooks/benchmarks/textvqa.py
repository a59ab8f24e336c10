"""TextVQA (val, 5,000 questions, ten annotator answers each) from VLMEvalKit's ``TextVQA_VAL.tsv`` (VQA
layout: ``answer`` holds the ten answers as a Python list literal), or from the official
``TextVQA_0.5.1_val.json`` (``{"data": [{question_id, question, image_id, answers, ...}]}``; images
``<image_root>/<image_id>.jpg``, by default ``train_images/`` beside the file, where TextVQA keeps its val
images).

Prompt as VLMEvalKit's ``ImageVQADataset``: the question, then "Answer the question using a single word or
phrase." Scored as the official evaluator (haotian-liu/LLaVA ``llava/eval/m4c_evaluator.py``
``TextVQAAccuracyEvaluator`` with ``EvalAIAnswerProcessor``): the normalised prediction scores
``min(1, matching annotators / 3)`` averaged over the ten leave-one-annotator-out subsets
(:func:`eval_hooks.benchmarks.vlmeval_tsv.vqa_accuracy`); the metric is the mean, in percent. Rows without
ten answers are scored by the same formula and counted (``counts.rows_without_10_answers``); the official
evaluator would stop on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.vlmeval_tsv import VqaTsv

FIELDS = ("question_id", "question", "image_id", "answers")


class TextVQA(VqaTsv):
    name = "textvqa"
    data_layout = "TextVQA_VAL.tsv (VLMEvalKit layout) under the data root"
    file_name = "TextVQA_VAL.tsv"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        if data_path.suffix.lower() != ".json":
            return super().load(data_path, image_root)
        data = read_json(data_path, what="TextVQA file")
        records = data.get("data") if isinstance(data, dict) else None
        if not isinstance(records, list):
            raise UserError(
                f'{data_path}: expected the official TextVQA layout {{"data": [{{{", ".join(FIELDS)}, ...}}]}}'
            )
        images = Path(image_root) if image_root else data_path.parent / "train_images"
        items = []
        for row, record in enumerate(records):
            missing = [f for f in FIELDS if not isinstance(record, dict) or f not in record]
            if missing or not isinstance(record["answers"], list) or not record["answers"]:
                raise UserError(
                    f"{data_path}: data[{row}]: missing or empty field '{(missing or ['answers'])[0]}' "
                    f"(TextVQA records have {', '.join(FIELDS)})"
                )
            answers = [str(answer) for answer in record["answers"]]
            meta = {
                "answers": answers,
                "answer": answers[0],
                "question": str(record["question"]),
                "split": None,
                "category": None,
            }
            items.append(
                self.make_item(
                    str(record["question_id"]), str(record["question"]), images / f"{record['image_id']}.jpg", meta
                )
            )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        result = super().score(items, predictions)
        result["counts"]["rows_without_10_answers"] = sum(len(item.meta["answers"]) != 10 for item in items)
        return result
