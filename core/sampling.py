"""Seeded uniform subsampling: the one meaning of ``max_train_samples`` for every trainer."""

from __future__ import annotations

import random


def sample_indices(total: int, count: int | None, seed: int) -> list[int]:
    """Indices of at most ``count`` of ``total`` rows, drawn uniformly at random (seeded), in file order.

    >>> sample_indices(5, None, seed=0)
    [0, 1, 2, 3, 4]
    >>> sample_indices(1000, 3, seed=0) == sample_indices(1000, 3, seed=0)
    True
    """
    if count is None or count >= total:
        return list(range(total))
    return sorted(random.Random(seed).sample(range(total), count))
