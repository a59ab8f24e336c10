"""ChartQA (test: 1,250 human-written and 1,250 augmented questions), from VLMEvalKit's ``ChartQA_TEST.tsv``
(VQA layout, ``split`` human / augmented) or from the official release folder ``ChartQA Dataset/test/``
(``test_human.json`` and ``test_augmented.json``, records ``{imgname, query, label}``, charts in ``png/``).

Prompt as VLMEvalKit's ``ImageVQADataset``: the question, then "Answer the question using a single word or
phrase." Scored as VLMEvalKit's ``relaxed_accuracy`` (``vlmeval/dataset/utils/vqa_eval.py``), which is
pix2struct's ``relaxed_correctness`` (:func:`rewards.graders.relaxed_match`): the stripped prediction is
right when within 5% of a numeric answer (a trailing % divides by 100), else when it equals the answer
ignoring case; the best over the reference answers. Relaxed accuracy overall and per split, in percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.vlmeval_tsv import VqaTsv
from rewards.graders import completion_text

SPLITS = ("human", "augmented")


class ChartQA(VqaTsv):
    name = "chartqa"
    limit_strata = ("split",)
    data_layout = (
        "ChartQA_TEST.tsv (VLMEvalKit layout) under the data root, "
        "or --data chartqa='ChartQA Dataset/test' (official JSON + png/)"
    )
    file_name = "ChartQA_TEST.tsv"
    metric = "relaxed_accuracy"

    def item_score(self, prediction: str | None, answers: list[str]) -> float:
        if prediction is None:
            return 0.0
        return float(any(relaxed_match(prediction.strip(), answer) for answer in answers))

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        if not data_path.is_dir():
            return super().load(data_path, image_root)
        files = [
            (split, data_path / f"test_{split}.json")
            for split in SPLITS
            if (data_path / f"test_{split}.json").is_file()
        ]
        if not files:
            raise UserError(
                f"{data_path}: expected test_human.json and/or test_augmented.json (the official ChartQA test folder)"
            )
        charts = Path(image_root) if image_root else data_path / "png"
        items = []
        for split, file in files:
            records = read_json(file, what="ChartQA file")
            if not isinstance(records, list):
                raise UserError(f"{file}: expected a JSON list of {{imgname, query, label}} records")
            for row, record in enumerate(records):
                if not isinstance(record, dict) or not {"imgname", "query", "label"} <= record.keys():
                    raise UserError(f"{file}: record {row}: expected ChartQA fields imgname, query, label")
                meta = {
                    "answers": [str(record["label"])],
                    "answer": str(record["label"]),
                    "question": str(record["query"]),
                    "split": split,
                    "category": None,
                }
                items.append(
                    self.make_item(f"{split}/{row}", str(record["query"]), charts / str(record["imgname"]), meta)
                )
        return items


# ---- ChartQA's official relaxed correctness


def _relaxed_float(text: str) -> float | None:
    try:
        return float(text[:-1].rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_match(prediction: Any, target: Any, max_relative_change: float = 0.05) -> bool:
    """ChartQA's relaxed correctness (google-research/pix2struct ``pix2struct/metrics.py``
    ``relaxed_correctness``, also VLMEvalKit's): when both texts are numbers (a trailing "%" divides by
    100) and the target is not zero, right when ``|prediction - target| / |target| <= 5%``; otherwise a
    case-insensitive exact match of the whole texts. The caller strips the prediction (VLMEvalKit does,
    the target it leaves as it is).

    >>> relaxed_match("10.4", "10")
    True
    >>> relaxed_match("10.6", "10")
    False
    >>> relaxed_match("Yes", "yes")
    True
    """
    prediction = completion_text(prediction) if not isinstance(prediction, (int, float)) else str(prediction)
    target = str(target) if target is not None else ""
    if prediction is None:
        return False
    predicted, expected = _relaxed_float(prediction[:MAX_SCAN_CHARS]), _relaxed_float(target)
    if predicted is not None and expected:
        return abs(predicted - expected) / abs(expected) <= max_relative_change
    return prediction.lower() == target.lower()
