"""Fail at once, in one line, when a model is neither a local directory nor a Hub model that can be had: a
local-looking path that is no directory (instead of the Hub's "Repo id must be in the form ..."), or a Hub model
neither cached nor reachable (instead of ``huggingface_hub`` retrying for about a minute before a long traceback)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from core.errors import UserError

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


def is_cached(repo_id: str, filename: str = "config.json", revision: str | None = None) -> bool:
    """Whether ``filename`` of the Hub model ``repo_id`` (at ``revision``, default ``main``) is in the local Hugging
    Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, filename, revision=revision), str)
    except ValueError:  # not a valid repo id (HFValidationError): not cached, and loading will say why
        return False


def looks_local(name: str) -> bool:
    """Whether ``name`` is meant as a local directory rather than a Hub id (``namespace/name``, at most one
    ``/``): it starts with ``./``, ``../``, ``/`` or ``~``, has more than one ``/``, or its first folder exists here
    (``models/qwen`` beside a ``models/`` folder)."""
    text = str(name)
    if text in (".", "..") or text.startswith(("./", "../", "/", "~")) or text.count("/") > 1:
        return True
    head, slash, _ = text.partition("/")
    return bool(slash) and Path(head).is_dir()


def require_model_source(name: str, flag: str, *, revision: str | None = None, probe_hub: bool = True) -> None:
    """Raise a one-line :class:`UserError` at once when ``name`` cannot be loaded: a path that is not a
    directory, a local-looking name (:func:`looks_local`) with no directory there (``"<flag>: <name>: no such
    directory"``), or a Hub model that is not cached while ``HF_HUB_OFFLINE`` is set or (``probe_hub``) the Hub
    cannot be reached; return quietly otherwise (loading then proceeds as usual)."""
    path = Path(name)
    if path.is_dir():
        return
    if path.exists():
        raise UserError(f"{flag}: {name}: not a directory (a model is a folder holding config.json and its weights)")
    if is_cached(name, revision=revision):
        return
    if looks_local(name):
        # transformers reads the path as written: a leading ~ is no home directory to it
        home = name.startswith("~") and path.expanduser().is_dir()
        hint = "; ~ is not expanded here, write the full path" if home else ""
        raise UserError(f"{flag}: {name}: no such directory{hint}")
    reason = "HF_HUB_OFFLINE is set" if hub_offline() else None
    if reason is None and probe_hub and not hub_reachable():
        reason = "the Hub cannot be reached"
    if reason is None:
        return
    local = Path(name).name
    raise UserError(
        f"{flag}: {name!r} is not a local directory and not in the Hugging Face cache, and {reason}; download it "
        f"where there is network (`huggingface-cli download {name} --local-dir models/{local}`) and pass "
        f"{flag} models/{local}"
    )


MODEL_FILES = ("config.json", "adapter_config.json")  # a full model's, a PEFT adapter's


def require_model(name: str, flag: str) -> None:
    """:func:`require_model_source` for a model to load as it is: a local directory must hold a model
    (:data:`MODEL_FILES`); a run directory still training, with saved ``checkpoint-N`` folders and no final
    model yet, is named with its latest saved checkpoint.

    Raises:
        UserError: ``"<flag>: <name>: ..."``, one line.
    """
    from core.run_layout import checkpoints, is_saved_checkpoint

    path = Path(name)
    if not path.is_dir():
        require_model_source(name, flag)
        return
    if any((path / file).is_file() for file in MODEL_FILES):
        return
    saved = [folder for _, folder in checkpoints(path) if is_saved_checkpoint(folder)]
    if saved:
        raise UserError(
            f"{flag}: {name} holds no final model yet (a run still training?); its latest saved checkpoint is "
            f"{saved[-1]}: pass {flag} {saved[-1]}"
        )
    raise UserError(f"{flag}: {name}: no model here (a model is a folder holding config.json and its weights)")
