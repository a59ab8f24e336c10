"""Secrets among a run's settings: which keys hold one, the refusal of one written in a recipe file, and its
redaction wherever settings are recorded (``veritune_run.json``, the W&B config, the process arguments W&B
records), so that no token reaches a file, a log, a W&B run or a model card.

A key holds a secret when it ends in ``token`` (``hub_token``, ``hf_token``, ``token``), ``password``,
``passwd``, ``secret``, ``api_key``/``apikey``, or another ``*_key`` of ``secret``/``access``/``private``,
compared word by word (words split at ``_`` and ``-``). So ``max_new_tokens``, ``pad_token`` and the other
tokenizer special tokens, ``image_token_id``, ``tokenizer_name`` and ``api_key_env`` (the name of a variable)
are settings, not secrets. A Hugging Face token (``hub_token``, a ``token`` of ``model_init_kwargs``) is taken
off the settings into ``HF_TOKEN``, which ``huggingface_hub`` reads (:func:`withhold_secrets`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import fields, is_dataclass
from typing import Any

from core.errors import UserError

# Tokenizer special tokens (transformers' ``SPECIAL_TOKENS_ATTRIBUTES`` and the processors' media tokens): a
# token string, not a credential.
_SPECIAL_TOKENS = frozenset(
    {"bos", "eos", "unk", "sep", "pad", "cls", "mask", "image", "video", "audio", "vision", "boi", "eoi"}
)
_SECRET_WORDS = frozenset({"token", "password", "passwd", "secret", "apikey"})
_KEY_QUALIFIERS = frozenset({"api", "secret", "access", "private"})

# Where a secret goes instead of a recipe: the variable its library reads.
SECRET_ENV_VARS = {"hub_token": "HF_TOKEN", "token": "HF_TOKEN", "hf_token": "HF_TOKEN"}


def is_secret_key(key: str) -> bool:
    """Whether a setting's key names a secret (module docstring)."""
    words = [word for word in re.split(r"[_\-.]", str(key).lower()) if word]
    if not words:
        return False
    last = words[-1]
    if last == "token":
        return not (len(words) > 1 and words[-2] in _SPECIAL_TOKENS)
    if last in _SECRET_WORDS:
        return True
    return last == "key" and len(words) > 1 and words[-2] in _KEY_QUALIFIERS


def secret_env_var(key: str) -> str:
    """The environment variable to hold the secret of ``key`` (``HF_TOKEN`` for ``hub_token``)."""
    name = str(key).rsplit(".", 1)[-1]
    return SECRET_ENV_VARS.get(name, re.sub(r"[^A-Z0-9]+", "_", name.upper()))


def redacted(key: str) -> str:
    """What a recorded secret reads: ``<HUB_TOKEN>``, as transformers' ``TrainingArguments.to_dict`` writes it."""
    return f"<{str(key).upper()}>"


def _holds_value(value: Any) -> bool:
    return value is not None and value != ""


def secret_keys(values: Any, prefix: str = "") -> list[str]:
    """The dotted keys of ``values`` (a mapping, nested mappings and lists of them) that hold a secret."""
    found: list[str] = []
    if isinstance(values, dict):
        for key, value in values.items():
            path = f"{prefix}{key}"
            if is_secret_key(str(key)) and _holds_value(value):
                found.append(path)
            else:
                found += secret_keys(value, f"{path}.")
    elif isinstance(values, list):
        for index, value in enumerate(values):
            found += secret_keys(value, f"{prefix}{index}.")
    return found


def check_no_secrets(values: dict[str, Any], source: str) -> None:
    """Refuse a secret written in a recipe file: the file is copied into the model card, ``veritune_run.json``
    and the W&B config, and read by everyone who can read the file.

    Raises:
        UserError: ``"<source>: <key>: a secret is not written in a recipe file ...; set <ENV> instead"``.
    """
    keys = secret_keys(values)
    if keys:
        key = keys[0]
        raise UserError(
            f"{source}: {key}: a secret is not written in a recipe file (the model card, veritune_run.json and W&B "
            f"copy the recipe); remove it and set the environment variable {secret_env_var(key)} instead"
        )


def redact_secrets(value: Any) -> Any:
    """``value`` with every secret (:func:`is_secret_key`) in its mappings replaced by :func:`redacted`."""
    if isinstance(value, dict):
        return {
            key: redacted(key) if is_secret_key(str(key)) and _holds_value(item) else redact_secrets(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_secrets(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_secrets(item) for item in value)
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """Command-line arguments with each secret flag's value redacted: ``--hub_token X``, ``--hub-token=X``, and
    a secret inside a JSON mapping value (``--model_init_kwargs '{"token": "X"}'``)."""
    out: list[str] = []
    secret_flag: str | None = None
    for arg in argv:
        if secret_flag is not None:
            out.append(redacted(secret_flag))
            secret_flag = None
            continue
        if arg.startswith("--"):
            flag, eq, value = arg[2:].partition("=")
            key = flag.replace("-", "_")
            if is_secret_key(key):
                out.append(f"--{flag}={redacted(key)}" if eq else arg)
                secret_flag = None if eq else key
                continue
            if eq:
                out.append(f"--{flag}={_redact_json(value)}")
                continue
        out.append(_redact_json(arg))
    return out


def _redact_json(text: str) -> str:
    if not text.lstrip().startswith("{"):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return json.dumps(redact_secrets(value)) if secret_keys(value) else text


def withhold_secrets(*instances: Any) -> None:
    """Take each Hugging Face token off the parsed settings (``hub_token``, a ``token`` in a ``*_kwargs``
    mapping) into ``HF_TOKEN`` of this process, which ``huggingface_hub`` reads for every Hub call
    (``push_to_hub``, ``from_pretrained``), so that nothing that records the settings (``training_args.bin``,
    ``veritune_run.json``, the W&B config) holds it.

    Raises:
        UserError: two different tokens are given.
    """
    tokens: dict[str, str] = {}
    for instance in instances:
        if instance is None or not is_dataclass(instance):
            continue
        for field in fields(instance):
            value = getattr(instance, field.name, None)
            if field.name in SECRET_ENV_VARS and isinstance(value, str) and value:
                tokens[field.name] = value
                setattr(instance, field.name, None)
            elif isinstance(value, dict):
                for key in [key for key in value if key in SECRET_ENV_VARS]:
                    token = value.pop(key)
                    if isinstance(token, str) and token:
                        tokens[f"{field.name}.{key}"] = token
    if len(set(tokens.values())) > 1:
        raise UserError(f"{' and '.join(tokens)}: two different Hugging Face tokens; give one, in HF_TOKEN")
    if tokens:
        os.environ["HF_TOKEN"] = next(iter(tokens.values()))


def withhold_token_flags(argv: list[str]) -> list[str]:
    """``argv`` without its Hugging Face token flags (``--hub_token X``, ``--hub-token=X``, a ``token`` inside a
    JSON mapping value such as ``--model_init_kwargs '{"token": "X"}'``), the token moved into ``HF_TOKEN`` of
    this process. ``veritune launch`` passes the rest to its workers, which inherit ``HF_TOKEN``, so the token is
    not on their command lines, which every user of a node can read (``ps``) for the whole run.

    Raises:
        UserError: two different tokens are given.
    """
    tokens: dict[str, str] = {}
    out: list[str] = []
    pending: str | None = None
    owner = "argument"  # the flag a separate value belongs to (``--model_init_kwargs '{...}'``)
    for arg in argv:
        if pending is not None:
            tokens[pending] = arg
            pending = None
            continue
        flag, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", arg)
        key = flag.replace("-", "_")
        if flag and not eq:
            owner = key
        if key in SECRET_ENV_VARS:
            if eq:
                tokens[key] = value
            else:
                pending = key
            continue
        mapping = _json_mapping(value)
        held = [name for name in mapping or {} if name in SECRET_ENV_VARS]
        if not held:
            out.append(arg)
            continue
        for name in held:
            token = mapping.pop(name)
            if isinstance(token, str) and token:
                tokens[f"{key if eq else owner}.{name}"] = token
        out.append(f"--{flag}={json.dumps(mapping)}" if eq else json.dumps(mapping))
    if pending is not None:
        out.append(f"--{pending}")  # a flag without its value: the entry script's parser says so
    values = {token for token in tokens.values() if token}
    if len(values) > 1:
        raise UserError(f"{' and '.join(tokens)}: two different Hugging Face tokens; give one, in HF_TOKEN")
    if values:
        os.environ["HF_TOKEN"] = values.pop()
    return out


def _json_mapping(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
