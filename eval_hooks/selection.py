"""Which items a limit keeps (``--limit N``, ``NAME:N``, a recipe's ``eval_limit``): the one home of the rule.

``stratified`` (the default): a seeded sample of ``N`` units spread over the benchmark's strata (POPE's
random/popular/adversarial, FINER's settings, AMBER's question types, HallusionBench's categories and
subcategories, ...) in proportion to their sizes. Each stratum's share is ``N * size / total`` rounded by
the largest-remainder method; within a stratum the benchmark's groups (the paraphrases of a question, a
q+/q- pair, a HallusionBench figure set) are visited in an order drawn from ``random.Random`` seeded with
the seed and the stratum's name, and each group is taken whole while it fits in the stratum's share; what
whole groups leave of ``N`` (a share of 5 questions holds two pairs) is then filled one group at a time from
the stratum furthest below its share, while a group fits. So the selection depends only on the items' ids
and meta, the limit and the seed: the same items at every checkpoint and in every run with the same seed;
exactly ``N`` units whenever whole groups can make ``N`` (a stratum may then get a group more or fewer than
its share), never more.

``first``: the items of the first ``N`` units in file order (the old behaviour, for quick debugging).

The unit that ``N`` counts is a question (the paraphrases ``Q/p0``, ``Q/p1``, ... of a question count once),
or a pair for a benchmark with ``limit_by_pair`` (FINER's yes/no probe). What a benchmark's strata and
groups are, it declares itself (:class:`eval_hooks.base.Benchmark`: ``limit_strata``, ``limit_groups``).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from core.errors import UserError
from eval_hooks.base import Benchmark, EvalItem

LIMIT_MODES = ("stratified", "first")
DEFAULT_LIMIT_MODE = "stratified"
DEFAULT_LIMIT_SEED = 0


def check_limit(limit: int | None, mode: str, source: str = "--limit") -> None:
    """A limit below 1 or an unknown mode is a one-line error."""
    if limit is not None and limit < 1:
        raise UserError(f"{source}: must be at least 1, got {limit}")
    if mode not in LIMIT_MODES:
        raise UserError(f"{source} mode {mode!r}: expected one of {', '.join(LIMIT_MODES)}")


def unit_name(benchmark: Benchmark) -> str:
    """What a limit of ``benchmark`` counts: ``pair`` (``limit_by_pair``) or ``question``."""
    return "pair" if benchmark.limit_by_pair else "question"


def select_items(
    benchmark: Benchmark,
    items: list[EvalItem],
    limit: int | None,
    *,
    seed: int = DEFAULT_LIMIT_SEED,
    mode: str = DEFAULT_LIMIT_MODE,
) -> tuple[list[EvalItem], dict[str, Any]]:
    """The items ``limit`` keeps (in file order) and the record of the selection (``metrics.json``'s
    ``selection``): the limit, its mode and seed, the unit it counts, and per stratum the units available and
    kept. Without a limit every item is kept (mode ``all``)."""
    check_limit(limit, mode)
    units = [benchmark.limit_unit(item) for item in items]
    group_keys = [benchmark.limit_group(item) for item in items]
    stratum_of: dict[str, str] = {}  # a group belongs to its first item's stratum: it is never split
    for key, item in zip(group_keys, items):
        stratum_of.setdefault(key, benchmark.limit_stratum(item))
    strata = [stratum_of[key] for key in group_keys]
    if limit is None or limit >= len(set(units)):
        kept = list(range(len(items)))
        used_mode = "all"
    elif mode == "first":
        kept = _first(units, limit)
        used_mode = mode
    else:
        kept = _stratified(group_keys, units, strata, limit, seed)
        used_mode = mode
    chosen = [items[index] for index in kept]
    available = _units_by_stratum(units, strata, range(len(items)))
    selected = _units_by_stratum(units, strata, kept)
    items_by_stratum = Counter(strata[index] for index in kept)
    record = {
        "limit": limit,
        "mode": used_mode,
        "seed": seed if used_mode == "stratified" else None,
        "unit": unit_name(benchmark),
        "strata_by": list(benchmark.limit_strata),
        "units": sum(selected.values()),
        "items": len(chosen),
        "available": {"units": len(set(units)), "items": len(items)},
        "strata": {
            stratum: {
                "available": available[stratum],
                "units": selected.get(stratum, 0),
                "items": items_by_stratum[stratum],
            }
            for stratum in available
        },
    }
    return chosen, record


def _units_by_stratum(units: list[str], strata: list[str], indices: Any) -> dict[str, int]:
    seen: dict[str, set[str]] = {}
    for index in indices:
        seen.setdefault(strata[index], set()).add(units[index])
    return {stratum: len(members) for stratum, members in seen.items()}


def _first(units: list[str], limit: int) -> list[int]:
    """The indices of the items of the first ``limit`` units, in file order."""
    kept, seen = [], set()
    for index, unit in enumerate(units):
        if unit not in seen:
            if len(seen) == limit:
                continue
            seen.add(unit)
        kept.append(index)
    return kept


def largest_remainder(total: int, sizes: dict[str, int]) -> dict[str, int]:
    """``total`` split over ``sizes`` in proportion (Hamilton's largest-remainder method); ties go to the
    larger stratum, then to the one seen first."""
    whole = sum(sizes.values())
    exact = {key: total * size / whole for key, size in sizes.items()}
    shares = {key: int(value) for key, value in exact.items()}
    order = sorted(sizes, key=lambda key: (-(exact[key] - shares[key]), -sizes[key], list(sizes).index(key)))
    for key in order[: total - sum(shares.values())]:
        shares[key] += 1
    return shares


def _stratified(group_keys: list[str], units: list[str], strata: list[str], limit: int, seed: int) -> list[int]:
    """The indices of a stratified, seeded sample of whole groups (see the module docstring)."""
    groups: dict[str, dict[str, list[int]]] = {}  # stratum -> group -> item indices, in first-seen order
    for index, key in enumerate(group_keys):
        groups.setdefault(strata[index], {}).setdefault(key, []).append(index)
    sizes = {
        stratum: len({units[i] for members in by_group.values() for i in members})
        for stratum, by_group in groups.items()
    }
    shares = largest_remainder(limit, sizes)
    kept: list[int] = []
    rest: list[tuple[str, str]] = []  # groups a share could not hold
    deficit: dict[str, int] = {}  # what whole groups left of each share
    for stratum, by_group in groups.items():
        order = list(by_group)
        random.Random(f"{seed}/{stratum}").shuffle(order)
        room = shares[stratum]
        for group in order:
            size = len({units[i] for i in by_group[group]})
            if size <= room:
                kept.extend(by_group[group])
                room -= size
            else:
                rest.append((stratum, group))
        deficit[stratum] = room
    # What is left of the limit: one group at a time from the stratum furthest below its share (ties: a
    # seeded order), while a group fits.
    room = sum(deficit.values())
    random.Random(f"{seed}/rest").shuffle(rest)
    while room > 0:
        fitting = [(s, g) for s, g in rest if len({units[i] for i in groups[s][g]}) <= room]
        if not fitting:
            break
        stratum, group = max(fitting, key=lambda pair: deficit[pair[0]])  # max keeps the first of equals
        rest.remove((stratum, group))
        size = len({units[i] for i in groups[stratum][group]})
        kept.extend(groups[stratum][group])
        deficit[stratum] -= size
        room -= size
    return sorted(kept)
