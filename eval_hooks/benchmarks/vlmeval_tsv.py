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
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.mcq_tsv import VlmevalTsv, _blank, read_vlmeval_tsv
from rewards.graders import YesNo, completion_text, normalize_yes_no_label

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
    limit_strata = ("category",)
    limit_groups = ("image_key",)  # the questions about one image (MME's acc+ pairs them)
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

    def item_correct(self, item: EvalItem, prediction: str) -> bool:
        return self.grade([item], {item.id: prediction})[0][item.id]

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


# ------------------------------------------------------------------------ VQA answers and numbers
# The answer normalisation of the official VQA / TextVQA evaluators (EvalAI's answer processor, as in
# haotian-liu/LLaVA ``llava/eval/m4c_evaluator.py``), reimplemented step for step, quirks included: see
# ``normalize_vqa_answer``. The tables below are protocol data (the evaluator's word lists), not code.

VQA_NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
VQA_ARTICLES = frozenset({"a", "an", "the"})
# Contractions written without their apostrophe, restored (the evaluator's table; "Im", "Ive" and "Id've"
# keep their capital I, so after lower-casing they never match, exactly as in the official code).
VQA_CONTRACTIONS = {
    "aint": "ain't",
    "arent": "aren't",
    "cant": "can't",
    "couldve": "could've",
    "couldnt": "couldn't",
    "couldn'tve": "couldn't've",
    "couldnt've": "couldn't've",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hadnt've": "hadn't've",
    "hadn'tve": "hadn't've",
    "hasnt": "hasn't",
    "havent": "haven't",
    "hed": "he'd",
    "hed've": "he'd've",
    "he'dve": "he'd've",
    "hes": "he's",
    "howd": "how'd",
    "howll": "how'll",
    "hows": "how's",
    "Id've": "I'd've",
    "I'dve": "I'd've",
    "Im": "I'm",
    "Ive": "I've",
    "isnt": "isn't",
    "itd": "it'd",
    "itd've": "it'd've",
    "it'dve": "it'd've",
    "itll": "it'll",
    "let's": "let's",
    "maam": "ma'am",
    "mightnt": "mightn't",
    "mightnt've": "mightn't've",
    "mightn'tve": "mightn't've",
    "mightve": "might've",
    "mustnt": "mustn't",
    "mustve": "must've",
    "neednt": "needn't",
    "notve": "not've",
    "oclock": "o'clock",
    "oughtnt": "oughtn't",
    "ow's'at": "'ow's'at",
    "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at",
    "shant": "shan't",
    "shed've": "she'd've",
    "she'dve": "she'd've",
    "she's": "she's",
    "shouldve": "should've",
    "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've",
    "shouldn'tve": "shouldn't've",
    "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've",
    "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll",
    "somebodys": "somebody's",
    "someoned": "someone'd",
    "someoned've": "someone'd've",
    "someone'dve": "someone'd've",
    "someonell": "someone'll",
    "someones": "someone's",
    "somethingd": "something'd",
    "somethingd've": "something'd've",
    "something'dve": "something'd've",
    "somethingll": "something'll",
    "thats": "that's",
    "thered": "there'd",
    "thered've": "there'd've",
    "there'dve": "there'd've",
    "therere": "there're",
    "theres": "there's",
    "theyd": "they'd",
    "theyd've": "they'd've",
    "they'dve": "they'd've",
    "theyll": "they'll",
    "theyre": "they're",
    "theyve": "they've",
    "twas": "'twas",
    "wasnt": "wasn't",
    "wed've": "we'd've",
    "we'dve": "we'd've",
    "weve": "we've",
    "werent": "weren't",
    "whatll": "what'll",
    "whatre": "what're",
    "whats": "what's",
    "whatve": "what've",
    "whens": "when's",
    "whered": "where'd",
    "wheres": "where's",
    "whereve": "where've",
    "whod": "who'd",
    "whod've": "who'd've",
    "who'dve": "who'd've",
    "wholl": "who'll",
    "whos": "who's",
    "whove": "who've",
    "whyll": "why'll",
    "whyre": "why're",
    "whys": "why's",
    "wont": "won't",
    "wouldve": "would've",
    "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've",
    "yall": "y'all",
    "yall'll": "y'all'll",
    "y'allll": "y'all'll",
    "yall'd've": "y'all'd've",
    "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've",
    "youd": "you'd",
    "youd've": "you'd've",
    "you'dve": "you'd've",
    "youll": "you'll",
    "youre": "you're",
    "youve": "you've",
}
VQA_PUNCTUATION = (
    ";",
    "/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
)
_DIGIT_COMMA_DIGIT = re.compile(r"(?<=\d)(,)+(?=\d)")
# The official pattern is written ``(?!<=\d)(\.)(?!\d)``: a misspelt look-behind, so in effect a period is
# removed unless a digit follows it ("2.5" keeps its point, "1." loses it). Kept as written.
_VQA_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
# The official call passes re.UNICODE (32) where ``sub`` expects a count: at most 32 periods are removed.
_VQA_PERIOD_LIMIT = int(re.UNICODE)


# VLMEvalKit's ``process_punctuation`` (vlmeval/smp/misc.py) uses its own two patterns; its period rule has
# a working look-behind ("1." keeps its period there).
_VLMEVAL_DIGIT_COMMA_DIGIT = re.compile(r"(\d)(,)(\d)")
_VLMEVAL_PERIOD = re.compile(r"(?<!\d)\.(?!\d)")


def _vqa_punctuation(
    text: str, comma_between_digits: re.Pattern[str] = _DIGIT_COMMA_DIGIT, period: re.Pattern[str] = _VQA_PERIOD
) -> str:
    """Punctuation step shared by both evaluators: a mark next to a space, or any mark at all once a
    digit-comma-digit occurs, is deleted; otherwise it becomes a space. Then periods go (see above)."""
    out = text
    delete_all = comma_between_digits.search(text) is not None
    for mark in VQA_PUNCTUATION:
        out = out.replace(mark, "" if delete_all or f"{mark} " in text or f" {mark}" in text else " ")
    return period.sub("", out, count=_VQA_PERIOD_LIMIT)


def _vqa_digits_and_articles(text: str) -> str:
    words = [VQA_NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    return " ".join(VQA_CONTRACTIONS.get(word, word) for word in words if word not in VQA_ARTICLES)


def normalize_vqa_answer(text: Any) -> str:
    """An answer as the VQA / TextVQA evaluators compare it (EvalAI's answer processor, followed in
    haotian-liu/LLaVA ``llava/eval/m4c_evaluator.py``; VLMEvalKit's ``process_answer`` is the same
    minus the first step): lower-case, drop commas and question marks, split off "'s"; newlines and
    tabs become spaces; punctuation (see ``_vqa_punctuation``); number words zero..ten become digits
    ("none" is 0), articles go, apostrophe-less contractions are restored.

    >>> normalize_vqa_answer("Two")
    '2'
    >>> normalize_vqa_answer("The Coca-Cola")
    'coca cola'
    >>> normalize_vqa_answer("1,000")
    '1000'
    """
    text = completion_text(text)
    if not text:
        return ""
    text = text[:MAX_SCAN_CHARS].lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _vqa_digits_and_articles(_vqa_punctuation(text))


def vlmeval_yes_no(text: Any) -> YesNo | None:
    """VLMEvalKit's Y/N answer extraction (``vlmeval/dataset/utils/yorn.py`` ``YOrN_Extraction``):
    lower-case, VQA punctuation handling (``vlmeval/smp/misc.py`` ``process_punctuation``), split on
    whitespace; "yes" when the word yes occurs and no does not, "no" the other way round, else None
    (VLMEvalKit's "Unknown", never correct).

    >>> vlmeval_yes_no("Yes, it is.")
    'yes'
    >>> vlmeval_yes_no("Yes and no.") is None
    True
    """
    text = completion_text(text)
    if text is None:
        return None
    lowered = text[:MAX_SCAN_CHARS].lower()
    words = _vqa_punctuation(lowered, _VLMEVAL_DIGIT_COMMA_DIGIT, _VLMEVAL_PERIOD).split()
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None
