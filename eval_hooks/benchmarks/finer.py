"""FINER MCQ benchmarks (arXiv 2603.17662, Sec. 2.4 and App. D): the public MCQ layout and
``veritune build finer-bench`` output.

Files: CSV, TSV, JSON or JSON lines with the columns ``image, qtype, question, choice1..choice5,
gt_index`` (veritune's builder adds ``k``); a directory holds any number of them. ``qtype`` is
``<setting>_pos`` or ``<setting>_neg``; rows come in pairs, the q+ row immediately followed by its q−
row about the same image, and a file whose rows do not pair up this way is refused with the rows named.

``gt_index`` is 0-based, as veritune writes it; a file whose indices run 1..5 (a 5 and no 0) is read as
1-based, and the result records which base was used.

Protocol (App. D): the question, the five lettered options, then the instruction "Please answer with a
single capital letter (A, B, C, D, or E)."; greedy decoding, at most 3 new tokens; the letter comes
from the shared option grader. The headline is the paired accuracy: a pair counts only when both q+
and q− are answered correctly. Reported overall, per setting (Multi-obj, Multi-attr, Multi-rel, Wh)
and per setting and entity count k (from the ``k`` column, or a trailing ``_<k>`` in the setting).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_table
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.mcq import grade_letters, letter_list, lettered, option_block, resolution_shares

FIELDS = ("image", "qtype", "question", "choice1", "choice2", "choice3", "choice4", "choice5", "gt_index")
FILE_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl")
_SETTING_K = re.compile(r"^(?P<setting>.+?)_k?(?P<k>\d+)$")


def finer_prompt(question: str, options: dict[str, str]) -> str:
    return f"{question}\n{option_block(options)}\nPlease answer with a single capital letter ({letter_list(options)})."


def finer_files(data_path: Path, what: str = "FINER MCQ") -> list[Path]:
    """The question files of a FINER benchmark: ``data_path`` itself, or every table in that directory
    (a build's manifest and filter log left out). Shared by FINER-bench and the yes/no probe, which use the
    same file layout."""
    if data_path.is_dir():
        files = sorted(
            p
            for p in data_path.iterdir()
            if p.suffix.lower() in FILE_SUFFIXES and not p.name.endswith((".manifest.json", ".filter_log.jsonl"))
        )
        if not files:
            raise UserError(f"{data_path}: no {what} file (.csv, .tsv, .json, .jsonl) in this directory")
        return files
    return [data_path]


def _index_base(path: Path, rows: list[dict[str, Any]]) -> int:
    try:
        indices = {int(str(row["gt_index"]).strip()) for row in rows}
    except ValueError:
        bad = next(i for i, row in enumerate(rows) if not str(row["gt_index"]).strip().lstrip("-").isdigit())
        raise UserError(f"{path}: row {bad + 2}: gt_index {rows[bad]['gt_index']!r} is not an integer") from None
    return 1 if 5 in indices and 0 not in indices else 0


class Finer(Benchmark):
    name = "finer"
    limit_strata = ("setting",)  # multi_obj, multi_attr, multi_rel, wh; a q+/q- pair kept whole
    answer_format = "option"
    default_max_new_tokens = 3  # App. D: "a maximum of 3 output tokens"
    data_layout = (
        "finer/*.csv (public FINER MCQ layout or `veritune build finer-bench` output), images in finer/images/"
    )

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        root = Path(image_root) if image_root else data_path if data_path.is_dir() else data_path.parent
        items: list[EvalItem] = []
        for path in finer_files(data_path):
            rows = read_table(path, what="FINER MCQ file")
            if not rows:
                raise UserError(f"{path}: no rows (expected the FINER MCQ columns {', '.join(FIELDS)})")
            missing = [f for f in FIELDS if f not in rows[0]]
            if missing:
                raise UserError(f"{path}: missing column '{missing[0]}' (FINER MCQ files have {', '.join(FIELDS)})")
            base = _index_base(path, rows)
            for index in range(0, len(rows), 2):
                pair = rows[index : index + 2]
                kinds = [str(row["qtype"]).rpartition("_") for row in pair]
                if len(pair) < 2 or kinds[0][2] != "pos" or kinds[1][2] != "neg" or kinds[0][0] != kinds[1][0]:
                    qtypes = ", ".join(str(row["qtype"]) for row in pair)
                    raise UserError(
                        f"{path}: rows {index + 2}-{index + 3}: expected a <setting>_pos row followed by its "
                        f"<setting>_neg row, found {qtypes}"
                    )
                images = [str(row["image"]).strip() for row in pair]
                if images[0] != images[1]:  # a pair asks one image twice; the public scorer checks it
                    raise UserError(
                        f"{path}: rows {index + 2}-{index + 3}: the q+ and q- rows of a pair must ask about "
                        f"the same image, found {images[0]!r} and {images[1]!r}"
                    )
                setting, k = kinds[0][0], str(pair[0].get("k") or "").strip()
                match = _SETTING_K.match(setting)
                if match and not k:
                    setting, k = match.group("setting"), match.group("k")
                for offset, (row, kind) in enumerate(zip(pair, kinds)):
                    options = lettered(row[f"choice{i}"] or "" for i in range(1, 6))
                    answer_index = int(str(row["gt_index"]).strip()) - base
                    if not 0 <= answer_index < len(options):
                        raise UserError(
                            f"{path}: row {index + offset + 2}: gt_index {row['gt_index']} "
                            f"is outside the {len(options)} choices"
                        )
                    image = root / str(row["image"])
                    items.append(
                        self.image_item(
                            f"{path.stem}/{index + offset}",
                            finer_prompt(str(row["question"]), options),
                            image,
                            {
                                "setting": setting,
                                "k": k,
                                "polarity": kind[2],
                                "pair": f"{path.stem}/{index // 2}",
                                "options": options,
                                "answer": "ABCDE"[answer_index],
                                "index_base": base,
                            },
                        )
                    )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct, resolution = grade_letters(items, predictions)
        pairs: dict[str, list[bool]] = defaultdict(list)
        pair_group: dict[str, tuple[str, str]] = {}
        for item in items:
            pairs[item.meta["pair"]].append(correct[item.id])
            pair_group[item.meta["pair"]] = (item.meta["setting"], item.meta["k"])
        pair_right = {pair: all(flags) for pair, flags in pairs.items()}

        def paired(keys: list[str]) -> float:
            return 100 * sum(pair_right[p] for p in keys) / len(keys) if keys else 0.0

        def accuracy(members: list[EvalItem]) -> float:
            return 100 * sum(correct[i.id] for i in members) / len(members) if members else 0.0

        metrics: dict[str, float] = {"paired_accuracy": paired(list(pair_right)), "accuracy": accuracy(items)}
        for polarity in ("pos", "neg"):
            metrics[f"{polarity}/accuracy"] = accuracy([i for i in items if i.meta["polarity"] == polarity])
        by_setting, by_k = [], []
        for setting in dict.fromkeys(group[0] for group in pair_group.values()):
            keys = [p for p, group in pair_group.items() if group[0] == setting]
            members = [i for i in items if i.meta["setting"] == setting]
            values = {
                "paired_accuracy": paired(keys),
                "accuracy": accuracy(members),
                "pos_accuracy": accuracy([i for i in members if i.meta["polarity"] == "pos"]),
                "neg_accuracy": accuracy([i for i in members if i.meta["polarity"] == "neg"]),
            }
            by_setting.append({"setting": setting, "pairs": len(keys), **values})
            metrics.update({f"{setting}/{name}": value for name, value in values.items()})
            for k in sorted({pair_group[p][1] for p in keys if pair_group[p][1]}, key=int):
                k_keys = [p for p in keys if pair_group[p][1] == k]
                by_k.append({"setting": setting, "k": int(k), "pairs": len(k_keys), "paired_accuracy": paired(k_keys)})
                metrics[f"{setting}/k{k}/paired_accuracy"] = paired(k_keys)
        metrics.update(resolution_shares(resolution))
        counts = {
            "items": len(items),
            "pairs": len(pairs),
            "missing_images": resolution["missing_image"],
            "unresolved": resolution["unresolved"],
        }
        bases = sorted({item.meta["index_base"] for item in items})
        return {
            "metrics": metrics,
            "tables": {"by_setting": by_setting, "by_setting_and_k": by_k},
            "counts": counts,
            "gt_index_base": bases[0] if len(bases) == 1 else bases,
        }
