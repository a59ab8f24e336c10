"""The LLM path of FINER-Tuning (FINER, arXiv 2603.17662, Sec. 3, Figs. 16-23): long captions ->
positive phrases Ψ+ -> negative phrases Ψ− -> preference tuples.

Per caption, three rounds of requests go through the shared cached client (:class:`ChatClient`):

1. extract Ψ+OBJ, Ψ+ATTR, Ψ+REL and the WH sentence (Figs. 16-18);
2. generate Ψ−OBJ (replace the k-th object), Ψ−ATTR (replace attribute unit k), Ψ−REL (replace clause k),
   with k drawn in code, and the positive WH pair (q+, a++) in A- or B-mode, drawn in code (Figs. 19-22);
3. the negative WH pair (q−, a+−) from q+ (Fig. 23).

Every answer is checked by :mod:`data_builders.finer.phrases`; a rejected answer is sent back with the
reason, up to ``attempts`` times in all, and then the unit is skipped and counted. The per-caption random
choices come from a generator seeded by (seed, image, caption), so a rerun asks exactly the same questions
and every answer comes from the client's cache: an interrupted build resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import iter_jsonl
from data_builders.finer import phrases
from data_builders.finer.phrases import AttributePhrase, Rejected, RelationPhrase
from data_builders.finer.prompts import (
    ATTR_EXTRACT,
    ATTR_NEGATIVE,
    OBJ_EXTRACT,
    OBJ_NEGATIVE,
    REL_EXTRACT,
    REL_NEGATIVE,
    RETRY,
    WH_NEGATIVE,
    WH_QA_A,
    WH_QA_B,
    WH_SENTENCE,
    Task,
)
from data_builders.finer.templates import PreferenceTuple, compose, compose_wh, join_and

DEFAULT_ATTEMPTS = 3


@dataclass
class Caption:
    """One input line: the image path (relative to the image root) and its long caption."""

    line: int
    image: str
    caption: str

    def rng(self, seed: int) -> random.Random:
        digest = hashlib.sha256(f"{seed}\0{self.image}\0{self.caption}".encode()).hexdigest()
        return random.Random(int(digest[:16], 16))


@dataclass
class Ask:
    """One request and the check its answer must pass (raises :class:`Rejected`; None = nothing to extract)."""

    task: Task
    user: str
    check: Callable[[str], Any]


@dataclass
class Outcome:
    ok: bool
    value: Any = None
    reason: str | None = None


@dataclass
class LLMStats:
    """What the LLM path skipped and rejected, and why."""

    skipped: Counter[str] = field(default_factory=Counter)
    rejected_answers: Counter[str] = field(default_factory=Counter)


def read_captions(path: Path) -> Iterator[Caption]:
    """``{image, caption}`` JSON lines; a line that is not JSON or lacks a key is an error naming the line."""
    for number, record in iter_jsonl(path, what="captions file"):
        if not isinstance(record, dict):
            raise UserError(f"{path}, line {number}: expected an object with 'image' and 'caption'")
        for key in ("image", "caption"):
            if not isinstance(record.get(key), str):
                raise UserError(f"{path}, line {number}: '{key}' is missing or not a string")
        yield Caption(number, record["image"].strip(), record["caption"].strip())


def _reason_kind(reason: str) -> str:
    """A reason without the quoted text and numbers, so that counts group by kind."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "…", reason))


def ask_all(client: Any, asks: list[Ask], *, attempts: int, desc: str, stats: LLMStats) -> list[Outcome]:
    """Send every request; a rejected answer is returned to the LLM with the reason, up to ``attempts`` in all."""
    outcomes = [Outcome(False, reason="not asked") for _ in asks]
    conversations = [ask.task.messages(ask.user) for ask in asks]
    pending = list(range(len(asks)))
    for attempt in range(1, attempts + 1):
        if not pending:
            break
        label = desc if attempt == 1 else f"{desc} (retry {attempt - 1})"
        answers = client.complete_many([conversations[i] for i in pending], desc=label)
        still = []
        for index, answer in zip(pending, answers):
            try:
                outcomes[index] = Outcome(True, asks[index].check(answer))
            except Rejected as err:
                stats.rejected_answers[f"{asks[index].task.name}: {_reason_kind(str(err))}"] += 1
                outcomes[index] = Outcome(False, reason=str(err))
                conversations[index] = [
                    *conversations[index],
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": RETRY.format(reason=err)},
                ]
                still.append(index)
        pending = still
    return outcomes


def _value(outcome: Outcome, subset: str, stats: LLMStats, stage: str) -> Any:
    """The checked value, or None after counting why there is none."""
    if not outcome.ok:
        stats.skipped[f"{subset}_{stage}_rejected_after_retries"] += 1
        return None
    if outcome.value is None:
        stats.skipped[f"{subset}_{stage}_nothing_to_extract"] += 1
    return outcome.value


def _check_tagged(tag: str, then: Callable[[str], Any]) -> Callable[[str], Any]:
    def check(answer: str) -> Any:
        value = phrases.tagged(answer, tag)
        return None if value is None else then(value)

    return check


def _check_pair(then: Callable[[tuple[str, str]], Any]) -> Callable[[str], Any]:
    def check(answer: str) -> Any:
        pair = phrases.question_answer(answer)
        return None if pair is None else then(pair)

    return check


def tuples_from_captions(
    captions: list[Caption], client: Any, *, seed: int, attempts: int, stats: LLMStats
) -> list[tuple[Caption, list[PreferenceTuple]]]:
    """Preference tuples for a batch of captions (up to eight per caption)."""
    rngs = [c.rng(seed) for c in captions]
    positives = extract_positives(captions, client, attempts=attempts, stats=stats)
    negatives = generate_negatives(captions, rngs, positives, client, attempts=attempts, stats=stats)
    wh_negatives = wh_negative_pairs(negatives, client, attempts=attempts, stats=stats)
    return [
        (c, compose_tuples(rng, pos, neg, wh_negatives.get(i)))
        for i, (c, rng, pos, neg) in enumerate(zip(captions, rngs, positives, negatives))
    ]


def extract_positives(captions: list[Caption], client: Any, *, attempts: int, stats: LLMStats) -> list[dict[str, Any]]:
    """Round 1: the positives Ψ+OBJ, Ψ+ATTR, Ψ+REL (Figs. 16-18) and the WH sentence of each caption."""
    first = []
    for c in captions:
        user = f"Caption:\n{c.caption}"
        first += [
            Ask(OBJ_EXTRACT, user, _check_tagged("PHRASE", lambda v, c=c: phrases.check_objects(v, c.caption))),
            Ask(ATTR_EXTRACT, user, _check_tagged("PHRASE", lambda v, c=c: phrases.check_attributes(v, c.caption))),
            Ask(REL_EXTRACT, user, _check_tagged("PHRASE", lambda v, c=c: phrases.check_relations(v, c.caption))),
            Ask(WH_SENTENCE, user, _check_tagged("SENTENCE", lambda v: v)),
        ]
    results = ask_all(client, first, attempts=attempts, desc="FINER: extract positives", stats=stats)
    positives = []
    for i in range(len(captions)):
        obj, attr, rel, sentence = results[4 * i : 4 * i + 4]
        positives.append(
            {
                "obj": _value(obj, "obj", stats, "positive"),
                "attr": _value(attr, "attr", stats, "positive"),
                "rel": _value(rel, "rel", stats, "positive"),
                "wh": _value(sentence, "wh", stats, "sentence"),
            }
        )
    return positives


def generate_negatives(
    captions: list[Caption],
    rngs: list[random.Random],
    positives: list[dict[str, Any]],
    client: Any,
    *,
    attempts: int,
    stats: LLMStats,
) -> list[dict[str, Any]]:
    """Round 2: the negatives (Figs. 20-22) and the positive WH pair (Fig. 19) of each caption."""
    second: list[Ask] = []
    owners: list[tuple[int, str]] = []
    for i, (c, rng, pos) in enumerate(zip(captions, rngs, positives)):
        for subset, ask in negative_asks(c, rng, pos):
            second.append(ask)
            owners.append((i, subset))
    results = ask_all(client, second, attempts=attempts, desc="FINER: generate negatives", stats=stats)
    negatives: list[dict[str, Any]] = [{} for _ in captions]
    for (i, subset), outcome in zip(owners, results):
        negatives[i][subset] = _value(outcome, subset, stats, "negative" if subset != "wh" else "positive_pair")
    return negatives


def negative_asks(c: Caption, rng: random.Random, pos: dict[str, Any]) -> list[tuple[str, Ask]]:
    """One caption's round-2 requests, by subset; the unit to replace (and the WH mode) is drawn in code."""
    asks: list[tuple[str, Ask]] = []
    if pos["obj"]:
        units: list[str] = pos["obj"]
        k = rng.randint(1, len(units))
        user = f"Caption:\n{c.caption}\nPHRASE={join_and(units)}\nREPLACE_INDEX={k}"
        check = _check_tagged("PHRASE", lambda v, u=units, k=k, c=c: phrases.check_object_negative(u, v, k, c.caption))
        asks.append(("obj", Ask(OBJ_NEGATIVE, user, check)))
    if pos["attr"]:
        attr: AttributePhrase = pos["attr"]
        k = rng.randint(1, len(attr.units))
        user = f"ATTRIBUTE PHRASE={attr.text}\nATTRIBUTE_INDEX={k}"
        check = _check_tagged("PHRASE", lambda v, a=attr, k=k: phrases.check_attribute_negative(a, v, k))
        asks.append(("attr", Ask(ATTR_NEGATIVE, user, check)))
    if pos["rel"]:
        rel: RelationPhrase = pos["rel"]
        k = rng.randint(1, len(rel.clauses))
        user = f"CLAUSE_INDEX={k}\nPHRASE={rel.head} {rel.rest}"
        check = _check_tagged("PHRASE", lambda v, r=rel, k=k: phrases.check_relation_negative(r, v, k))
        asks.append(("rel", Ask(REL_NEGATIVE, user, check)))
    if pos["wh"]:
        task = rng.choice((WH_QA_A, WH_QA_B))
        check = _check_pair(lambda p, s=pos["wh"]: phrases.check_wh_answer(p, s))
        asks.append(("wh", Ask(task, f"Sentence:\n{pos['wh']}", check)))
    return asks


def wh_negative_pairs(
    negatives: list[dict[str, Any]], client: Any, *, attempts: int, stats: LLMStats
) -> dict[int, Any]:
    """Round 3: the negative WH pair (Fig. 23) of each caption that has a positive one, by caption index."""
    third, wh_owners = [], []
    for i, neg in enumerate(negatives):
        if neg.get("wh"):
            question_pos = neg["wh"][0]
            third.append(
                Ask(
                    WH_NEGATIVE,
                    f"Question:\n{question_pos}",
                    _check_pair(lambda p, q=question_pos: phrases.check_wh_negative(p, q)),
                )
            )
            wh_owners.append(i)
    results = ask_all(client, third, attempts=attempts, desc="FINER: WH negatives", stats=stats)
    return {i: _value(outcome, "wh", stats, "negative_pair") for i, outcome in zip(wh_owners, results)}


def compose_tuples(
    rng: random.Random, pos: dict[str, Any], neg: dict[str, Any], wh_negative: Any
) -> list[PreferenceTuple]:
    """Compose one caption's tuples (App. G templates; WH symmetrised)."""
    tuples: list[PreferenceTuple] = []
    if pos["obj"] and neg.get("obj"):
        tuples += compose("obj", join_and(pos["obj"]), join_and(neg["obj"]), rng)
    if pos["attr"] and neg.get("attr"):
        tuples += compose("attr", pos["attr"].text, neg["attr"].text, rng)
    if pos["rel"] and neg.get("rel"):
        tuples += compose("rel", pos["rel"].noun_phrase(), neg["rel"].noun_phrase(), rng)
    if neg.get("wh") and wh_negative:
        (question_pos, answer_pos), (question_neg, answer_neg) = neg["wh"], wh_negative
        tuples += compose_wh(question_pos, _sentence(answer_pos), question_neg, _sentence(answer_neg))
    return tuples


def _sentence(text: str) -> str:
    """An answer as a sentence: capital first letter, final full stop."""
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
