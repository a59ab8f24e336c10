"""Reward functions with TRL's signature ``(completions, **kwargs) -> list[float | None]``.

Recipes name rewards by registry key (``reward_funcs: [accuracy, format]``) or by dotted path
(``my_project.rewards.my_reward``) for experiments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.registry import import_dotted
from rewards.options import option_accuracy_reward, plain_option_accuracy_reward
from rewards.oric import accuracy_reward, format_reward, plain_accuracy_reward

RewardFunc = Callable[..., list[float | None]]

REWARD_FUNCS: dict[str, RewardFunc] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "plain_accuracy": plain_accuracy_reward,
    "option_accuracy": option_accuracy_reward,
    "plain_option_accuracy": plain_option_accuracy_reward,
}


class UnknownRewardError(ValueError):
    """A reward name that is neither in the registry nor an importable dotted path."""


def get_reward_funcs(names: list[str]) -> list[RewardFunc]:
    """Resolve reward names to functions, in order.

    A name is a key of :data:`REWARD_FUNCS` or a dotted path ``package.module.function``.

    >>> [f.__name__ for f in get_reward_funcs(["accuracy", "format"])]
    ['accuracy_reward', 'format_reward']
    """
    return [_resolve(name) for name in names]


def _resolve(name: str) -> RewardFunc:
    if name in REWARD_FUNCS:
        return REWARD_FUNCS[name]
    if "." not in name:
        raise UnknownRewardError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARD_FUNCS))} or a dotted path")
    try:
        func: Any = import_dotted(name)
    except (ImportError, AttributeError) as err:
        raise UnknownRewardError(f"reward {name!r} cannot be imported: {err}") from None
    if not callable(func):
        raise UnknownRewardError(f"reward {name!r} is not callable")
    return func


__all__ = [
    "REWARD_FUNCS",
    "UnknownRewardError",
    "accuracy_reward",
    "format_reward",
    "get_reward_funcs",
    "option_accuracy_reward",
    "plain_accuracy_reward",
    "plain_option_accuracy_reward",
]
