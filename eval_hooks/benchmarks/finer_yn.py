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
curve, and ``paired_accuracy_l3_l7``, both twins of a level 3-7 pair right, which an answer drifting to "No"
cannot raise); accuracy on the positive twins (``pos_accuracy``, per level too); paired accuracy (both twins right,
as FINER's Acc_paired, Sec. 4.1) overall and per level, so that answering "No" to everything scores 0 like
answering "Yes" to everything; and the yes-proportion of all answers (an unresolved answer counts in its
denominator). The same per kind of contradiction (``negated_obj/``, ``negated_attr/``, ``negated_rel/``, from
the optional ``negated`` column): on blank images (a blind control) a model that reads the image, not the
words, is at chance there. The bootstrap's unit (``meta["pair"]``) is one q+/q− pair.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.finer_yn import LEVELS, PATTERNS
from core.finer_yn import REQUIRED_COLUMNS as FIELDS
from core.io import read_table
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.benchmarks.finer import finer_files
from rewards.graders import extract_yes_no, normalize_yes_no_label

INSTRUCTION = "Please answer with Yes or No."
FINE_LEVELS = (3, 4, 5, 6, 7)  # the headline: negatives from level 3 on (FINER's "finer granularity")


def finer_yn_prompt(question: str) -> str:
    return f"{question}\n{INSTRUCTION}"


def _level(path: Path, line: int, value: Any) -> int:
    text = str(value).strip().upper().removeprefix("L")
    if not text.isdigit() or int(text) not in LEVELS:
        raise UserError(f"{path}: row {line}: level {value!r} is not one of 1..7")
    return int(text)


class FinerYn(Benchmark):
    name = "finer_yn"
    limit_strata = ("level",)
    answer_format = "yes_no"
    default_max_new_tokens = 3  # a yes or a no; App. D gives the MCQ protocol 3 new tokens
    limit_by_pair = True  # `finer_yn:100`: the first 100 pairs, each with both twins
    data_layout = "finer_yn/*.csv (`veritune build finer-bench --protocol yn` output), images in finer_yn/images/"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        root = Path(image_root) if image_root else data_path if data_path.is_dir() else data_path.parent
        items: list[EvalItem] = []
        for path in finer_files(data_path, "FINER yes/no"):
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

    def counts(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[Hashable, int]:
        """Per group (``all``, ``L<k>``, ``negated_<kind>``, and ``fine``: the level 3-7 negatives and pairs), the
        tallies ``(group, field)`` of positive and negative items (``pos``, ``neg``), those answered right
        (``pos_right``, ``neg_right``), "yes" answers (``yes``), pairs (``pairs``) and pairs with both twins right
        (``pairs_right``); plus ``unresolved`` and ``missing_images``. A pair lies within one bootstrap unit, so
        the tallies add up over units."""
        tally: Counter[Hashable] = Counter()
        pairs: dict[str, list[Any]] = {}  # per pair: [items, right, level, negated kind]
        groups_of: dict[tuple[int, str, bool], list[str]] = {}  # the groups an item counts in
        for item in items:
            meta = item.meta
            if item.missing_images:
                answer = None
                tally["missing_images"] += 1
            else:
                answer = extract_yes_no(predictions.get(item.id))
                tally["unresolved"] += answer is None
            right, negative, level = answer == meta["label"], meta["polarity"] == "neg", meta["level"]
            kind = meta.get("negated") or ""
            key = (level, kind, negative)
            if key not in groups_of:
                names = ["all", f"L{level}"] + [f"negated_{kind}"] * bool(kind)
                groups_of[key] = names + ["fine"] * (negative and level in FINE_LEVELS)
            side, yes = "neg" if negative else "pos", answer == "yes"
            for group in groups_of[key]:
                tally[group, side] += 1
                tally[group, f"{side}_right"] += right
                tally[group, "yes"] += yes
            entry = pairs.setdefault(meta["pair"], [0, 0, level, kind])
            entry[0] += 1
            entry[1] += right
        for count, right, level, kind in pairs.values():
            for group in (
                "all",
                f"L{level}",
                f"negated_{kind}" if kind else "",
                "fine" if level in FINE_LEVELS else "",
            ):
                if group:
                    tally[group, "pairs"] += 1
                    tally[group, "pairs_right"] += count == 2 and right == 2
        return dict(tally)

    def metrics_from_counts(self, counts: Mapping[Hashable, int]) -> dict[str, float]:
        return self._summary(counts)[0]

    def _summary(
        self, counts: Mapping[Hashable, int]
    ) -> tuple[dict[str, float], list[dict[str, Any]], list[dict[str, Any]]]:
        """The metrics, the per-level table and the per-negated-kind table from :meth:`counts`' tallies."""

        def get(group: str, field: str) -> int:
            return counts.get((group, field), 0)

        def percent(part: int, whole: int) -> float:
            return 100 * part / whole if whole else 0.0

        def values(group: str, yes: bool = True) -> dict[str, float]:
            pos, neg = get(group, "pos"), get(group, "neg")
            out = {
                "neg_accuracy": percent(get(group, "neg_right"), neg),
                "pos_accuracy": percent(get(group, "pos_right"), pos),
                "paired_accuracy": percent(get(group, "pairs_right"), get(group, "pairs")),
            }
            return {**out, "yes_proportion": percent(get(group, "yes"), pos + neg)} if yes else out

        overall = values("all")
        metrics: dict[str, float] = {
            # 0 without level 3-7 queries (counts: neg_l3_l7): a bootstrap draw may hold none
            "neg_accuracy_l3_l7": percent(get("fine", "neg_right"), get("fine", "neg")),
            "paired_accuracy_l3_l7": percent(get("fine", "pairs_right"), get("fine", "pairs")),
            "paired_accuracy": overall["paired_accuracy"],
            "neg_accuracy": overall["neg_accuracy"],
            "pos_accuracy": overall["pos_accuracy"],
            "accuracy": percent(
                get("all", "pos_right") + get("all", "neg_right"), get("all", "pos") + get("all", "neg")
            ),
            "yes_proportion": overall["yes_proportion"],
        }
        by_level = []
        for level in LEVELS:
            if get(f"L{level}", "pos") + get(f"L{level}", "neg"):
                level_values = values(f"L{level}")
                by_level.append(
                    {"level": level, "pattern": PATTERNS[level], "pairs": get(f"L{level}", "pairs"), **level_values}
                )
                metrics.update({f"L{level}/{name}": value for name, value in level_values.items()})
        by_negated = []  # what the negative contradicts (obj, attr, rel): a blind control's chance check
        kinds = {key[0] for key in counts if isinstance(key, tuple) and key[0].startswith("negated_")}
        for group in sorted(g for g in kinds if get(g, "pos") + get(g, "neg")):
            kind_values = values(group, yes=False)
            by_negated.append({"negated": group.removeprefix("negated_"), "pairs": get(group, "pairs"), **kind_values})
            metrics.update({f"{group}/{name}": value for name, value in kind_values.items()})
        return metrics, by_level, by_negated

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        counts = self.counts(items, predictions)
        metrics, by_level, by_negated = self._summary(counts)
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
                "pairs": counts.get(("all", "pairs"), 0),
                "samples": len({item.meta["sample"] for item in items}),
                "neg_l3_l7": counts.get(("fine", "neg"), 0),
                "pairs_l3_l7": counts.get(("fine", "pairs"), 0),
                "unresolved": counts.get("unresolved", 0),
                "missing_images": counts.get("missing_images", 0),
            },
        }
