"""Fail at once, in one line, when a Hub model is neither local nor cached and the Hub cannot be reached
(instead of ``huggingface_hub`` retrying for about a minute before a long traceback)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from veritune.core.errors import UserError

TRUTHY = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) asks for no network."""
    return any(
        os.environ.get(name, "").strip().lower() in TRUTHY for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint (``HF_ENDPOINT``) opens within ``timeout`` seconds."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout):
            return True
    except OSError:
        return False


def is_cached(repo_id: str, filename: str = "config.json") -> bool:
    """Whether ``filename`` of the Hub model ``repo_id`` is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except ValueError:  # not a valid repo id (HFValidationError): not cached, and loading will say why
        return False


def require_model_source(name: str, flag: str) -> None:
    """Raise a one-line :class:`UserError` at once when ``name`` is not a local directory, not cached, and
    the Hub is offline or unreachable; return quietly otherwise (loading then proceeds as usual)."""
    if Path(name).exists() or is_cached(name):
        return
    reason = (
        "HF_HUB_OFFLINE is set" if hub_offline() else ("the Hub cannot be reached" if not hub_reachable() else None)
    )
    if reason is None:
        return
    local = Path(name).name
    raise UserError(
        f"{flag}: {name!r} is not a local directory and not in the Hugging Face cache, and {reason}; download it "
        f"where there is network (`huggingface-cli download {name} --local-dir models/{local}`) and pass "
        f"{flag} models/{local}"
    )
