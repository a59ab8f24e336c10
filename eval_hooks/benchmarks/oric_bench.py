"""ORIC-Bench (arXiv 2509.15695, Sec. 4, App. A.4, B.2; official release and scorer
``evaluate.py`` of ZhaoyangLi-1/ORIC): yes/no object existence under contextual incongruity. Every question
is asked with each of its four paraphrases; metrics are computed per paraphrase and averaged over the
four, as the paper reports.

Protocol (App. B.2, Sec. 4.1): the image, then the question wrapped in the prompt of Fig. 7
("Question: {question}" and, on the next line, "Please answer the question based on the given image."),
greedy decoding with a 1,024-token limit. Variants: ``oric_bench_cot`` wraps it in the zero-shot CoT
prompt of Fig. 12 ("Let's think step-by-step and then answer the question based on the given image.");
``oric_bench_r1`` asks it with the R1-style instruction of the Visual-RFT training prompt (Fig. 11).

Graders: ``oric_bench`` and ``oric_bench_cot`` read answers with the shared free-form grader
:func:`rewards.graders.extract_yes_no` (the paper's first, heuristic step; its GPT second step is the
optional ``--judge-*``); ``oric_bench_r1`` with the training reward's grader
:func:`rewards.graders.grade_tagged_yes_no` (the yes/no inside one ``<SOLUTION>`` block; anything else
is unverifiable, as in training, and no judge rescues it).

Metrics follow the official ``evaluate.py``: per-class (yes/no) precision, recall and F1, their macro
averages, and the yes-proportion of the predictions, in percent. An answer the grader cannot resolve is
neither yes nor no: it lowers the recall of its true class and counts in the yes-proportion's denominator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from core.prompts import with_r1_instruction
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.metrics import confusion, per_class_prf
from rewards.graders import extract_yes_no, grade_tagged_yes_no
from rewards.oric import ORIC_FIELDS, check_oric_record

LABELS = ("no", "yes")
PROMPT_FIG7 = "Question: {question}\nPlease answer the question based on the given image."
PROMPT_FIG12_COT = (
    "Question: {question}\nLet's think step-by-step and then answer the question based on the given image."
)
PAPER_MAX_NEW_TOKENS = 1024  # "temperature 0 and a 1,024-token limit" (Sec. 4.1)
SIZES = ("small", "medium", "large")


class OricBench(Benchmark):
    name = "oric_bench"
    limit_strata = ("label",)  # the yes and the no questions; a question's paraphrases kept whole
    answer_format = "yes_no"
    default_max_new_tokens = PAPER_MAX_NEW_TOKENS
    template = PROMPT_FIG7  # the user turn's text around each question
    grader = staticmethod(extract_yes_no)  # answer text -> "yes" / "no" / None
    data_layout = "oric/oric_bench.json (official release or `veritune build oric-bench`), images in coco/val2014/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "oric" / "oric_bench.json", data_root / "coco" / "val2014"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data = read_json(data_path, what="ORIC-Bench file")
        if not isinstance(data, list):
            raise UserError(f"{data_path}: expected a JSON list of {{{', '.join(ORIC_FIELDS)}}} records")
        root = Path(image_root) if image_root else Path(data_path).parent
        items = []
        for row, record in enumerate(data):
            label = check_oric_record(record, f"{data_path}: row {row}")
            questions = record["problem"] if isinstance(record["problem"], list) else [record["problem"]]
            image = root / record["image"]
            for index, question in enumerate(questions):
                items.append(
                    self.image_item(
                        f"{record['id']}/p{index}",
                        self.template.format(question=question),
                        image,
                        {
                            "label": label,
                            "paraphrase": index,
                            "object_size": record.get("object_size"),
                            "target_object": record["target_object"],
                            "question": question,
                        },
                    )
                )
        return items

    def item_correct(self, item: EvalItem, prediction: str) -> bool:
        """The benchmark's grader reads the label from the answer (unresolved is never correct)."""
        return not item.missing_images and self.grader(prediction) == item.meta["label"]

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        paraphrases = sorted({item.meta["paraphrase"] for item in items})
        per_paraphrase = {}
        resolved = unresolved = missing = 0
        for index in paraphrases:
            group = [item for item in items if item.meta["paraphrase"] == index]
            truth, predicted = [], []
            for item in group:
                answer = None if item.missing_images else self.grader(predictions.get(item.id))
                missing += bool(item.missing_images)
                resolved += answer is not None
                unresolved += answer is None and not item.missing_images
                truth.append(item.meta["label"])
                predicted.append(answer)
            per_paraphrase[index] = _metrics(truth, predicted, group)
        keys = per_paraphrase[paraphrases[0]].keys() if paraphrases else []
        averaged = {key: sum(m[key] for m in per_paraphrase.values()) / len(per_paraphrase) for key in keys}
        metrics = dict(averaged)
        for index, values in per_paraphrase.items():
            metrics.update(
                {
                    f"p{index}/{key}": value
                    for key, value in values.items()
                    if key.startswith("macro") or key == "yes_proportion"
                }
            )
        truth_all = [item.meta["label"] for item in items]
        pred_all = [None if item.missing_images else self.grader(predictions.get(item.id)) for item in items]
        return {
            "metrics": metrics,
            "tables": {
                "per_paraphrase": [{"paraphrase": i, **m} for i, m in per_paraphrase.items()],
                "confusion": [
                    {"true": label, **dict(zip(["pred_no", "pred_yes", "unresolved"], row))}
                    for label, row in zip(LABELS, confusion(truth_all, pred_all, LABELS))
                ],
            },
            "counts": {
                "items": len(items),
                "questions": len(items) // max(len(paraphrases), 1),
                "resolved": resolved,
                "unresolved": unresolved,
                "missing_images": missing,
            },
        }


def _metrics(truth: list[str], predicted: list[str | None], items: list[EvalItem]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label in LABELS:
        prf = per_class_prf(truth, predicted, label)
        out.update({f"{label}/{k}": 100 * v for k, v in prf.items() if k != "support"})
    for k in ("precision", "recall", "f1"):
        out[f"macro/{k}"] = (out[f"yes/{k}"] + out[f"no/{k}"]) / 2
    out["yes_proportion"] = 100 * sum(p == "yes" for p in predicted) / len(predicted) if predicted else 0.0
    for size in SIZES:  # recall of "yes" questions by object size, when the file records sizes
        hits = [
            p == "yes"
            for t, p, item in zip(truth, predicted, items)
            if t == "yes" and item.meta.get("object_size") == size
        ]
        if hits:
            out[f"yes_recall_{size}"] = 100 * sum(hits) / len(hits)
    return out


class OricBenchCot(OricBench):
    """ORIC-Bench with the zero-shot chain-of-thought prompt of Fig. 12 (the paper's CoT baseline)."""

    name = "oric_bench_cot"
    template = PROMPT_FIG12_COT


class OricBenchR1(OricBench):
    """ORIC-Bench asked with the R1-style instruction of the Visual-RFT training prompt (ORIC Fig. 11), for
    models trained with it, and graded by the training reward's grader (:func:`grade_tagged_yes_no`)."""

    name = "oric_bench_r1"
    answer_format = ""  # graded as in training: no judge resolves an answer outside the <SOLUTION> block
    template = with_r1_instruction("{question}")
    grader = staticmethod(grade_tagged_yes_no)
