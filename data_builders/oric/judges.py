"""Judges for LLM-guided positive sampling (ORIC Fig. 6): would this ROI object be expected, knowing only
the rest of the scene? An ROI object judged "no" is unpredictable from context and becomes a candidate
positive question.

Registry: ``JUDGES`` (name -> factory ``f(images, **options)``) plus :func:`get_judge`, with a dotted-path
fallback for custom judges. A judge is called with a list of ``(context_classes, target_class, image_id)``
queries and returns ``"yes"``, ``"no"`` or ``None`` (unparsable answer, never a candidate) for each.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from core.errors import UserError
from core.llm_client import ChatClient
from core.registry import import_dotted
from data_builders.oric.annotations import ImageRecord
from rewards.graders import extract_yes_no

Query = tuple[Sequence[str], str, int]

# Fig. 6, in our words: judge existence from the listed background objects alone, without priors.
JUDGE_PROMPT = (
    "The background of an image contains these objects: {background}. Without using textual priors, "
    "common-sense knowledge or general assumptions about which objects tend to appear together, can you "
    'determine whether the object "{target}" is present in the image? Answer yes or no.'
)


# Reasoning models served without a reasoning parser put their thoughts in the answer: only what follows counts.
_REASONING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


class Judge(Protocol):
    """What the builder needs from a judge."""

    name: str

    def __call__(self, queries: list[Query]) -> list[str | None]: ...

    def describe(self) -> dict[str, Any]: ...


class CooccurrenceJudge:
    """An LLM-free judge from the annotation file's own class co-occurrence statistics.

    P(target | context) is the mean over context classes c of P(target | c) = n(target, c) / n(c), counted
    over images with the queried image left out (so an image never predicts itself). The answer is "yes"
    (predictable) when that probability is at least ``threshold``.
    """

    name = "cooccurrence"

    def __init__(self, images: list[ImageRecord], threshold: float = 0.25) -> None:
        self.threshold = threshold
        # the classes of each image: its boxes by class (membership is all a query needs; no copy)
        self.classes_of: dict[int, Any] = {record.image_id: record.boxes for record in images}
        self.class_counts, self.pair_counts = _cooccurrence_counts([record.boxes for record in images])
        # P(target | c) = (n(target, c) - 1) / (n(c) - 1), the usual query: both classes in the image, which is
        # left out (so they co-occur at least once); by target, then context class, as probability() divides
        self._left_out: dict[str, dict[str, float]] = {}
        for (a, b), both in self.pair_counts.items():
            for c, target in ((a, b), (b, a)):
                count = self.class_counts[c] - 1
                self._left_out.setdefault(target, {})[c] = (both - 1) / count if count > 0 else 0.0

    def probability(self, context: Sequence[str], target: str, image_id: int | None = None) -> float:
        """Mean P(target | c) over the context classes, leaving ``image_id`` out of the counts."""
        own = self.classes_of.get(image_id, ()) if image_id is not None else ()
        target_own = target in own
        left_out = self._left_out.get(target, {}) if target_own else {}
        pair_counts, class_counts = self.pair_counts, self.class_counts
        total = 0.0
        for c in context:
            c_own = c in own
            if c_own and c in left_out:  # both classes in the image: the table's value, the same arithmetic
                total += left_out[c]
                continue
            pair = pair_counts[(c, target) if c < target else (target, c)] - (1 if c_own and target_own else 0)
            count = class_counts[c] - (1 if c_own else 0)
            total += pair / count if count > 0 else 0.0
        return total / len(context) if context else 0.0

    def __call__(self, queries: list[Query]) -> list[str | None]:
        probability, threshold = self.probability, self.threshold
        return ["yes" if probability(ctx, target, image_id) >= threshold else "no" for ctx, target, image_id in queries]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "threshold": self.threshold}


def _cooccurrence_counts(classes: list[Any]) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    """n(c), the images with class c, and n(a, b) for a < b, the images with both, over images given by their
    collections of distinct class names: a 0/1 image-by-class matrix and its Gram matrix, in blocks of rows
    small enough for float32 products to be exact integers."""
    names = sorted(set(chain.from_iterable(classes)))
    index = {name: position for position, name in enumerate(names)}
    lengths = np.fromiter(map(len, classes), dtype=np.intp, count=len(classes))
    columns = np.fromiter(map(index.__getitem__, chain.from_iterable(classes)), dtype=np.intp, count=lengths.sum())
    rows = np.repeat(np.arange(len(classes)), lengths)
    pairs = np.zeros((len(names), len(names)), dtype=np.int64)
    block = max(1, min(1 << 23, (1 << 22) // max(1, len(names))))  # < 2**24 rows: exact in float32; ~16 MiB
    bounds = np.searchsorted(rows, np.arange(0, len(classes) + block, block))
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if begin == end:
            continue
        first = rows[begin]
        present = np.zeros((rows[end - 1] - first + 1, len(names)), dtype=np.float32)
        present[rows[begin:end] - first, columns[begin:end]] = 1.0
        pairs += (present.T @ present).astype(np.int64)
    counts = pairs.diagonal().tolist()
    upper = np.argwhere(np.triu(pairs, 1))
    values = pairs[upper[:, 0], upper[:, 1]].tolist()
    class_counts = Counter(dict(zip(names, counts)))
    pair_counts = Counter({(names[a], names[b]): n for (a, b), n in zip(upper.tolist(), values)})
    return class_counts, pair_counts


class OpenAIJudge:
    """Asks an OpenAI-compatible chat model the Fig. 6 question (temperature 0, cached, concurrent)."""

    name = "openai"

    def __init__(self, client: ChatClient) -> None:
        self.client = client
        self.unreadable_example: str | None = None  # the first answer with no yes/no in it, for error messages

    @staticmethod
    def prompt(context: Sequence[str], target: str) -> str:
        return JUDGE_PROMPT.format(background="[" + ", ".join(context) + "]", target=target)

    def __call__(self, queries: list[Query]) -> list[str | None]:
        answers = self.client.complete_many([self.prompt(ctx, target) for ctx, target, _ in queries], desc="LLM judge")
        verdicts = [extract_yes_no(_REASONING.sub("", answer)) for answer in answers]
        if self.unreadable_example is None:
            self.unreadable_example = next((a for a, v in zip(answers, verdicts) if v is None), None)
        return verdicts

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.client.model, "endpoint": self.client.url, "prompt": JUDGE_PROMPT}


def _cooccurrence_judge(images: list[ImageRecord], *, threshold: float = 0.25, **_: Any) -> Judge:
    return CooccurrenceJudge(images, threshold=threshold)


def _openai_judge(
    images: list[ImageRecord],
    *,
    client: ChatClient | None = None,
    base_url: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    cache_path: str | Path = "outputs/cache/llm.sqlite",
    concurrency: int = 8,
    max_retries: int = 5,
    timeout: float = 60.0,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    **_: Any,
) -> Judge:
    if client is not None:  # the caller's client (the build CLI's, its endpoint check already armed)
        return OpenAIJudge(client)
    if not base_url or not model:
        raise UserError("--context-judge openai needs --llm-base-url and --llm-model")
    client = ChatClient(
        base_url,
        model,
        cache_path=cache_path,
        api_key_env=api_key_env,
        concurrency=concurrency,
        max_retries=max_retries,
        timeout=timeout,
        temperature=temperature,
        max_tokens=max_tokens,
    )
    return OpenAIJudge(client)


# name -> factory(images, **options); options a factory does not use are ignored.
JUDGES: dict[str, Callable[..., Judge]] = {"cooccurrence": _cooccurrence_judge, "openai": _openai_judge}


def get_judge(name: str, images: list[ImageRecord], **options: Any) -> Judge:
    """Build a judge by registry name (:data:`JUDGES`) or dotted path to a factory ``f(images, **options)``.

    Options: ``threshold`` (cooccurrence); ``client`` (an open :class:`ChatClient` to ask) or ``base_url``,
    ``model``, ``api_key_env``, ``cache_path``, ``concurrency``, ``max_retries``, ``timeout``, ``temperature``,
    ``max_tokens`` (openai).
    """
    return judge_factory(name)(images, **options)


def judge_factory(name: str) -> Callable[..., Judge]:
    """The factory of the judge ``name`` (:data:`JUDGES` or a dotted path), checked before a build starts.

    Raises:
        UserError: no judge of that name.
    """
    factory = JUDGES.get(name)
    if factory is None and "." in name:
        try:
            factory = import_dotted(name)
        except (ImportError, AttributeError):
            factory = None
    if factory is None:
        raise UserError(
            f"--context-judge: unknown judge {name!r}; known: {', '.join(JUDGES)}, or a dotted path to a factory"
        )
    return factory
