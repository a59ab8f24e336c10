"""TextVQA (val, 5,000 questions, ten annotator answers each) from VLMEvalKit's ``TextVQA_VAL.tsv`` (VQA
layout: ``answer`` holds the ten answers as a Python list literal).

Prompt as VLMEvalKit's ``ImageVQADataset``: the question, then "Answer the question using a single word or
phrase." Scored as the official evaluator (haotian-liu/LLaVA ``llava/eval/m4c_evaluator.py``
``TextVQAAccuracyEvaluator`` with ``EvalAIAnswerProcessor``): the normalised prediction scores
``min(1, matching annotators / 3)`` averaged over the ten leave-one-annotator-out subsets
(:func:`eval_hooks.benchmarks.vlmeval_tsv.vqa_accuracy`); the metric is the mean, in percent. Rows without
ten answers are scored by the same formula and counted (``counts.rows_without_10_answers``); the official
evaluator would stop on them.
"""

from __future__ import annotations

from typing import Any

from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.vlmeval_tsv import VqaTsv


class TextVQA(VqaTsv):
    name = "textvqa"
    data_layout = "TextVQA_VAL.tsv (VLMEvalKit layout) under the data root"
    file_name = "TextVQA_VAL.tsv"

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        result = super().score(items, predictions)
        result["counts"]["rows_without_10_answers"] = sum(len(item.meta["answers"]) != 10 for item in items)
        return result
