"""HaloQuest (google/haloquest, ECCV 2024): open questions built to trigger hallucinations, judged by an LLM.

Release layout: ``haloquest-eval.csv`` (608 questions; vendored, CC-BY-4.0) with an unnamed index column
and ``image_name``, ``url``, ``image type`` (real / generated), ``hallucination type`` (false premises,
visual challenge, insufficient context), ``question``, ``groundtruth responses`` (several
references joined by "; ") and ``split``; the images (downloaded from ``url``) in ``images/`` under
``image_name``. The prompt is the question.

Scored as the repository's ``HaloQuest_Colab.ipynb`` auto-eval: every answer goes to the configured LLM
judge (``--llm-base-url/--llm-model``; this benchmark cannot be scored without one) with the
notebook's prompt (question, model response and the joined ground-truth responses), and the judge's
``is_prediction_correct`` decides; the score is the share of correct answers in percent, overall, per
hallucination type (the three subsets) and per image type, as the README's leaderboard reports.
Deviations: the notebook queries Gemini 1.5 Pro through langfun, which renders the prompt (veritune
removes its indentation, as langfun's template does) and adds langfun's own structured-output
instructions for the ``PredictionEvaluation`` schema; veritune instead appends a plain request for a JSON
object with the same six fields, and reads ``is_prediction_correct`` from it (a reply without it is
unresolved and wrong). The judge is whatever model the endpoint serves, recorded in
``answer_resolution.model``. Generation is greedy with 256 new tokens. An item whose image is missing
is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_table
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import EvalItem, RubricJudged, release_file_paths
from rewards.graders import completion_text

FIELDS = ("image_name", "image type", "hallucination type", "question", "groundtruth responses")
SUBSETS = ("false premises", "visual challenge", "insufficient context")
VERDICT = {True: "[judge] correct", False: "[judge] incorrect"}

# The auto-eval prompt of HaloQuest_Colab.ipynb (protocol data: wording reproduced exactly).
JUDGE_PROMPT = (
    "Your task is to determine if the model response is correct given the question and groundtruth response.\n"
    "Ensure to interpret the model response in accordance to the the question.\n"
    "\n"
    'If the question asks about a detail of an element that is not present in the image, A prediction of "yes", '
    '"no" or "nothing" should be considered incorrect because it inaccurately suggests that the element is '
    "presented in the image.\n"
    "The correct prediction in such cases should acknowledge the absence of the element in question by stating the "
    "element is not present.\n"
    "If prediction says that it can not assist or cannot provide an answer, then the prediction is incorrect.\n"
    "If the question is about counting, then the prediction is correct only it matches the groundtruth counts "
    "exactly.\n"
    "\n"
    "question={question},\n"
    "model_response={model_response}\n"
    "groundtruth_response={groundtruth_response},"
)
# veritune's stand-in for langfun's structured-output instructions (the notebook's PredictionEvaluation schema)
SCHEMA_REQUEST = (
    "\n\nReply with a JSON object with exactly these fields: question (str), model_response (str), "
    "groundtruth_response (str), "
    "sentence_interpret_model_response_main_point (str), sentence_interpret_groundtruth_response_main_point (str), "
    "is_prediction_correct (bool)."
)


class HaloQuest(RubricJudged):
    name = "haloquest"
    limit_strata = ("hallucination_type",)
    title = "HaloQuest"
    default_max_new_tokens = 256
    requires_judge = True
    judge_max_tokens = 512
    data_layout = "haloquest/haloquest-eval.csv (official) with images in haloquest/images/<image_name>"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "haloquest" / "haloquest-eval.csv", data_root / "haloquest" / "images"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path, root = release_file_paths(data_path, image_root, "haloquest-eval.csv")
        rows = read_table(data_path, what="HaloQuest CSV")
        items = []
        for index, row in enumerate(rows):
            if not set(FIELDS) <= row.keys():
                raise UserError(f"{data_path}: row {index + 1}: expected HaloQuest columns {', '.join(FIELDS)}")
            image = root / str(row["image_name"])
            key = str(row.get("") or index)  # the release's unnamed index column
            items.append(
                self.image_item(
                    key,
                    str(row["question"]),
                    image,
                    {
                        "question": str(row["question"]),
                        "answer": str(row["groundtruth responses"]),
                        "hallucination_type": str(row["hallucination type"]),
                        "image_type": str(row["image type"]),
                    },
                )
            )
        if len({item.id for item in items}) != len(items):
            raise UserError(f"{data_path}: the index column repeats a value; each row needs its own")
        return items

    def judge_request(self, item: EvalItem, prediction: str) -> tuple[str, None]:
        prompt = JUDGE_PROMPT.format(
            question=item.meta["question"], model_response=prediction, groundtruth_response=item.meta["answer"]
        )
        return prompt + SCHEMA_REQUEST, None

    def judge_verdict(self, item: EvalItem, reply: str) -> str | None:
        verdict = haloquest_verdict(reply)
        return None if verdict is None else VERDICT[verdict]

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct = []
        for item in items:
            text = self.judged_prediction(item, predictions, prefix="[judge] ", what="verdict")
            correct.append(not item.missing_images and text == VERDICT[True])
        metrics = {"score": 100 * sum(correct) / len(items) if items else 0.0}
        tables = {}
        for key, column in (("hallucination_type", "hallucination type"), ("image_type", "image type")):
            rows = []
            values = sorted(
                {item.meta[key] for item in items},
                key=lambda v: (v not in SUBSETS, SUBSETS.index(v) if v in SUBSETS else 0, v),
            )
            for value in values:
                flags = [c for c, item in zip(correct, items) if item.meta[key] == value]
                rows.append({column: value, "questions": len(flags), "score": 100 * sum(flags) / len(flags)})
                metrics[f"{value.replace(' ', '_')}/score"] = 100 * sum(flags) / len(flags)
            tables[f"per_{key}"] = rows
        counts = {"items": len(items), "missing_images": sum(bool(i.missing_images) for i in items)}
        return {"metrics": metrics, "tables": tables, "counts": counts}


# ---- HaloQuest's official verdict field


_JSON_BOOL = re.compile(r'"?is_prediction_correct"?\s*[:=]\s*"?(true|false)"?', re.IGNORECASE)


def haloquest_verdict(reply: Any) -> bool | None:
    """HaloQuest's auto-eval field ``is_prediction_correct`` from the judge's structured reply (a JSON
    object, possibly in a code fence, or ``is_prediction_correct: true``); None when it is absent."""
    text = (completion_text(reply) or "")[:MAX_SCAN_CHARS]
    matches = _JSON_BOOL.findall(text)
    if len({m.lower() for m in matches}) != 1:
        return None
    return matches[0].lower() == "true"
