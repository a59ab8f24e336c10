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

from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.vlmeval_tsv import VqaTsv
from rewards.graders import relaxed_match
from veritune.core.errors import UserError
from veritune.core.io import read_json

SPLITS = ("human", "augmented")


class ChartQA(VqaTsv):
    name = "chartqa"
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
