"""The fallback of every name registry (rewards, benchmarks, ORIC context judges): a name that is not
registered may be a dotted path ``package.module.attribute`` to the object itself. Only a name a user wrote in a
recipe key or a flag goes here; a name read from a file or a folder resolves to registered entries only."""

from __future__ import annotations

import importlib
from typing import Any


def import_dotted(name: str) -> Any:
    """The object at dotted path ``name``.

    Raises:
        ImportError: ``name`` has no dot or its module cannot be imported.
        AttributeError: the module has no such attribute.
    """
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        raise ImportError(f"{name!r} is not a dotted path")
    return getattr(importlib.import_module(module_name), attr)
