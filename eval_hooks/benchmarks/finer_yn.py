"""FINER's yes/no granularity probe (FINER: "MLLMs Hallucinate under Fine-grained Negative Queries", arXiv
2603.17662, Sec. 1 and Fig. 1): the output of ``veritune build finer-bench --protocol yn``.

Files: CSV (also TSV, JSON, JSON lines) with the columns ``image, sample, level, polarity, question, answer``
(the builder adds ``pattern`` and ``negated``); a directory holds any number of them. Every (``sample``,
``level``) has exactly one ``pos`` row (answer yes: the true description) and one ``neg`` row (answer no: the
same description with one contradiction) about the same image; a file that breaks this is refused with the
rows named.

Protocol: the image, then the query followed by the instruction "Please answer with Yes or No." (Sec. 1 limits
the answer to "Yes" or "No" without printing its instruction; this one follows the MCQ instruction of App. D);
greedy decoding, at most 3 new tokens (App. D's budget); answers read by the shared free-form grader
:func:`rewards.graders.extract_yes_no` (unresolved: wrong on both polarities).

Metrics, in percent: accuracy on the negative queries per level (``L<k>/neg_accuracy``: the curve of Fig. 1b)
and overall (``neg_accuracy``); on levels 3-7 together (``neg_accuracy_l3_l7``, the fine-grained end of the
curve); accuracy on the positive twins (``pos_accuracy``, per level too); paired accuracy (both twins right,
as FINER's Acc_paired, Sec. 4.1) overall and per level, so that answering "No" to everything scores 0 like
answering "Yes" to everything; and the yes-proportion of all answers (an unresolved answer counts in its
denominator). The same per kind of contradiction (``negated_obj/``, ``negated_attr/``, ``negated_rel/``, from
the optional ``negated`` column): on blank images (a blind control) a model that reads the image, not the
words, is at chance there. The bootstrap's unit (``meta["pair"]``) is one q+/q− pair.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from eval_hooks.base import Benchmark, EvalItem
from rewards.graders import extract_yes_no, normalize_yes_no_label
from veritune.core.errors import UserError
from veritune.core.finer_yn import LEVELS, PATTERNS
from veritune.core.finer_yn import REQUIRED_COLUMNS as FIELDS
from veritune.core.io import read_table

FILE_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl")
INSTRUCTION = "Please answer with Yes or No."
FINE_LEVELS = (3, 4, 5, 6, 7)  # the headline: negatives from level 3 on (FINER's "finer granularity")


def finer_yn_prompt(question: str) -> str:
    return f"{question}\n{INSTRUCTION}"


def _files(data_path: Path) -> list[Path]:
    if data_path.is_dir():
        files = sorted(
            p
            for p in data_path.iterdir()
            if p.suffix.lower() in FILE_SUFFIXES and not p.name.endswith(".manifest.json")
        )
        if not files:
            raise UserError(f"{data_path}: no FINER yes/no file (.csv, .tsv, .json, .jsonl) in this directory")
        return files
    return [data_path]


def _level(path: Path, line: int, value: Any) -> int:
    text = str(value).strip().upper().removeprefix("L")
    if not text.isdigit() or int(text) not in LEVELS:
        raise UserError(f"{path}: row {line}: level {value!r} is not one of 1..7")
    return int(text)


class FinerYn(Benchmark):
    name = "finer_yn"
    answer_format = "yes_no"
    default_max_new_tokens = 3  # a yes or a no; App. D gives the MCQ protocol 3 new tokens
    limit_by_pair = True  # `finer_yn:100`: the first 100 pairs, each with both twins
    data_layout = "finer_yn/*.csv (`veritune build finer-bench --protocol yn` output), images in finer_yn/images/"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        root = Path(image_root) if image_root else data_path if data_path.is_dir() else data_path.parent
        items: list[EvalItem] = []
        for path in _files(data_path):
            rows = read_table(path, what="FINER yes/no file")
            if not rows:
                raise UserError(f"{path}: no rows (expected the columns {', '.join(FIELDS)})")
            missing = [f for f in FIELDS if f not in rows[0]]
            if missing:
                raise UserError(
                    f"{path}: missing column '{missing[0]}' (FINER yes/no files have {', '.join(FIELDS)}; "
                    "build one with `veritune build finer-bench --protocol yn`)"
                )
            pairs: dict[tuple[str, int], dict[str, tuple[int, dict[str, Any]]]] = defaultdict(dict)
            for number, row in enumerate(rows, start=2):  # line numbers as a spreadsheet shows them
                level = _level(path, number, row["level"])
                polarity = str(row["polarity"]).strip().lower()
                if polarity not in ("pos", "neg"):
                    raise UserError(f"{path}: row {number}: polarity {row['polarity']!r} is not pos or neg")
                label = normalize_yes_no_label(str(row["answer"]))
                if label != ("yes" if polarity == "pos" else "no"):
                    raise UserError(
                        f"{path}: row {number}: a {polarity} query's answer must be "
                        f"{'yes' if polarity == 'pos' else 'no'}, found {row['answer']!r}"
                    )
                key = (str(row["sample"]).strip(), level)
                if polarity in pairs[key]:
                    raise UserError(
                        f"{path}: rows {pairs[key][polarity][0]} and {number}: two {polarity} queries for sample "
                        f"{key[0]!r} at level {level}"
                    )
                pairs[key][polarity] = (number, row)
            for (sample, level), twins in pairs.items():
                if len(twins) != 2:
                    (number, _), have = next(iter(twins.values())), next(iter(twins))
                    raise UserError(
                        f"{path}: row {number}: sample {sample!r} level {level} has a {have} query without its "
                        f"{'neg' if have == 'pos' else 'pos'} twin"
                    )
                images = [str(twins[p][1]["image"]).strip() for p in ("pos", "neg")]
                if images[0] != images[1]:
                    raise UserError(
                        f"{path}: rows {twins['pos'][0]} and {twins['neg'][0]}: the twins of sample {sample!r} level "
                        f"{level} must ask about the same image, found {images[0]!r} and {images[1]!r}"
                    )
                pair = f"{path.stem}/{sample}/L{level}"
                negated = str(twins["neg"][1].get("negated") or "").strip().lower()  # optional column
                for polarity in ("pos", "neg"):
                    row = twins[polarity][1]
                    question = str(row["question"]).strip()
                    items.append(
                        self.image_item(
                            f"{pair}/{polarity}",
                            finer_yn_prompt(question),
                            root / images[0],
                            {
                                "label": "yes" if polarity == "pos" else "no",
                                "level": level,
                                "polarity": polarity,
                                "pair": pair,
                                "sample": f"{path.stem}/{sample}",
                                "negated": negated,
                                "question": question,
                            },
                        )
                    )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        answers = {item.id: None if item.missing_images else extract_yes_no(predictions.get(item.id)) for item in items}
        correct = {item.id: answers[item.id] == item.meta["label"] for item in items}
        pairs: dict[str, list[bool]] = defaultdict(list)
        pair_level: dict[str, int] = {}
        for item in items:
            pairs[item.meta["pair"]].append(correct[item.id])
            pair_level[item.meta["pair"]] = item.meta["level"]
        pair_right = {pair: len(flags) == 2 and all(flags) for pair, flags in pairs.items()}

        def accuracy(members: list[EvalItem]) -> float:
            return 100 * sum(correct[i.id] for i in members) / len(members) if members else 0.0

        def paired(keys: list[str]) -> float:
            return 100 * sum(pair_right[p] for p in keys) / len(keys) if keys else 0.0

        def yes_share(members: list[EvalItem]) -> float:
            return 100 * sum(answers[i.id] == "yes" for i in members) / len(members) if members else 0.0

        negatives = [i for i in items if i.meta["polarity"] == "neg"]
        positives = [i for i in items if i.meta["polarity"] == "pos"]
        fine = [i for i in negatives if i.meta["level"] in FINE_LEVELS]
        metrics: dict[str, float] = {
            "neg_accuracy_l3_l7": accuracy(fine),  # 0 without such queries (counts: neg_l3_l7), as a draw may be
            "paired_accuracy": paired(list(pair_right)),
            "neg_accuracy": accuracy(negatives),
            "pos_accuracy": accuracy(positives),
            "accuracy": accuracy(items),
            "yes_proportion": yes_share(items),
        }
        by_level = []
        for level in LEVELS:
            members = [i for i in items if i.meta["level"] == level]
            if not members:
                continue
            keys = [p for p, lv in pair_level.items() if lv == level]
            values = {
                "neg_accuracy": accuracy([i for i in members if i.meta["polarity"] == "neg"]),
                "pos_accuracy": accuracy([i for i in members if i.meta["polarity"] == "pos"]),
                "paired_accuracy": paired(keys),
                "yes_proportion": yes_share(members),
            }
            by_level.append({"level": level, "pattern": PATTERNS[level], "pairs": len(keys), **values})
            metrics.update({f"L{level}/{name}": value for name, value in values.items()})
        by_negated = []  # what the negative contradicts (obj, attr, rel): a blind control's chance check
        for kind in sorted({i.meta.get("negated") for i in items} - {"", None}):
            members = [i for i in items if i.meta.get("negated") == kind]
            keys = sorted({i.meta["pair"] for i in members})
            values = {
                "neg_accuracy": accuracy([i for i in members if i.meta["polarity"] == "neg"]),
                "pos_accuracy": accuracy([i for i in members if i.meta["polarity"] == "pos"]),
                "paired_accuracy": paired(keys),
            }
            by_negated.append({"negated": kind, "pairs": len(keys), **values})
            metrics.update({f"negated_{kind}/{name}": value for name, value in values.items()})
        unresolved = sum(answers[i.id] is None and not i.missing_images for i in items)
        return {
            "metrics": metrics,
            "tables": {"by_level": by_level, "by_negated": by_negated},
            # The Fig. 1b curve (veritune report draws it per checkpoint, base against trained).
            "curves": [
                {
                    "title": "accuracy on negative queries by level (FINER Fig. 1b)",
                    "table": "by_level",
                    "x": "level",
                    "y": "neg_accuracy",
                },
                {"title": "paired accuracy by level", "table": "by_level", "x": "level", "y": "paired_accuracy"},
            ],
            "counts": {
                "items": len(items),
                "pairs": len(pairs),
                "samples": len({i.meta["sample"] for i in items}),
                "neg_l3_l7": len(fine),
                "unresolved": unresolved,
                "missing_images": sum(bool(i.missing_images) for i in items),
            },
        }
