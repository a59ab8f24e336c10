"""The node layout of a training job whose recipe generates with a vLLM server (``use_vllm: true``,
``vllm_mode: server``): one node runs ``trl vllm-serve``, the others train and send it their rollouts.

``slurm/train.sbatch`` reads the layout from here (``python -m veritune.slurm_layout RECIPE [-- overrides]``
prints shell assignments, the recipe's accelerate config among them) and ``veritune slurm submit`` asks for
one node more than the trainers need. Only the recipe's YAML (its ``include:`` bases merged) and the
``--key value`` overrides are read (no model, no TRL import: this runs on the batch host in a second); the
full recipe checks are the entry point's.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError, exit_on_user_error
from core.recipe_file import load_recipe_file, read_recipe, resolve_recipe_path

DEFAULT_PORT = 8000  # TRL's vllm_server_port default
_TRUE, _FALSE = {"true", "yes", "1", "y", "t"}, {"false", "no", "0", "n", "f"}


@dataclass
class VLLMServerLayout:
    """What the server node runs: ``trl vllm-serve`` with ``serve_args``, listening on ``port``. The address it
    binds is not among them: ``slurm/train.sbatch`` adds ``--host`` with the server node's address, the one the
    trainers use (TRL's default, ``0.0.0.0``, would listen on every interface of the node)."""

    model: str
    port: int = DEFAULT_PORT
    serve_args: list[str] = field(default_factory=list)


def _flag_values(overrides: list[str]) -> dict[str, str]:
    """``--key value`` / ``--key=value`` pairs of the command line (later ones win, as in argparse)."""
    values: dict[str, str] = {}
    index = 0
    while index < len(overrides):
        token = overrides[index]
        if token.startswith("--"):
            key, eq, value = token[2:].partition("=")
            if not eq and index + 1 < len(overrides) and not overrides[index + 1].startswith("--"):
                index += 1
                value = overrides[index]
            elif not eq:
                value = "true"  # a bare boolean flag
            values[key.replace("-", "_")] = value
        index += 1
    return values


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise UserError(f"{key}: expected true or false, got {value!r}")


def vllm_server_layout(recipe: str, overrides: list[str] | None = None) -> VLLMServerLayout | None:
    """The server node's command when ``recipe`` (with ``overrides``) generates with a vLLM server; None
    when it does not (no vLLM, or colocated engines).

    Raises:
        UserError: the recipe cannot be read, names no model, sets ``vllm_server_base_url`` (the job starts
            its own server), or has a malformed port.
    """
    values: dict[str, Any] = dict(read_recipe(recipe))
    values.update(_flag_values(list(overrides or [])))
    if not _as_bool("use_vllm", values.get("use_vllm", False)) or values.get("vllm_mode", "colocate") != "server":
        return None
    model = values.get("model_name_or_path")
    if not model:
        raise UserError(f"{recipe}: model_name_or_path: required (the vLLM server loads it)")
    if values.get("vllm_server_base_url"):
        raise UserError(
            f"{recipe}: vllm_server_base_url: the Slurm job starts its own vLLM server on its last node and points "
            "the trainers at it; remove vllm_server_base_url (or run the trainers by hand against your server)"
        )
    try:
        port = int(values.get("vllm_server_port", DEFAULT_PORT))
    except (TypeError, ValueError):
        raise UserError(f"vllm_server_port: expected a port number, got {values.get('vllm_server_port')!r}") from None
    args = ["--model", str(model), "--port", str(port)]
    if values.get("model_revision"):
        args += ["--revision", str(values["model_revision"])]
    if values.get("dtype") not in (None, "auto"):
        args += ["--dtype", str(values["dtype"])]
    if values.get("vllm_max_model_length") is not None:
        args += ["--max_model_len", str(values["vllm_max_model_length"])]
    if values.get("vllm_model_impl"):
        args += ["--vllm_model_impl", str(values["vllm_model_impl"])]
    if _as_bool("trust_remote_code", values.get("trust_remote_code", False)):
        args += ["--trust_remote_code", "true"]
    return VLLMServerLayout(model=str(model), port=port, serve_args=args)


def shell_assignments(layout: VLLMServerLayout | None) -> str:
    """``VLLM_SERVER=0``, or ``VLLM_SERVER=1`` with ``VLLM_PORT`` and the ``VLLM_SERVE_ARGS`` bash array."""
    if layout is None:
        return "VLLM_SERVER=0\n"
    return (
        "VLLM_SERVER=1\n"
        f"VLLM_PORT={layout.port}\n"
        f"VLLM_SERVE_ARGS=({' '.join(shlex.quote(arg) for arg in layout.serve_args)})\n"
    )


def recipe_accelerate_config(recipe: str) -> str:
    """The recipe's ``accelerate_config`` (its includes merged), resolved as the entry scripts resolve it; as
    written when it is found nowhere (the batch script then names it as missing); empty when unset."""
    loaded = load_recipe_file(recipe)
    value = loaded.values.get("accelerate_config")
    if not isinstance(value, str) or not value:
        return ""
    return resolve_recipe_path(loaded.sources["accelerate_config"], value, key="accelerate_config")


def main(argv: list[str] | None = None) -> int:
    """``python -m veritune.slurm_layout RECIPE [--] [--key value ...]``: the layout as shell assignments, and
    the recipe's accelerate config as ``RECIPE_ACCELERATE_CONFIG``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise UserError("usage: python -m veritune.slurm_layout RECIPE [-- --key value ...]")
    recipe, overrides = args[0], [a for a in args[1:] if a != "--"]
    print(shell_assignments(vllm_server_layout(recipe, overrides)), end="")
    print(f"RECIPE_ACCELERATE_CONFIG={shlex.quote(recipe_accelerate_config(recipe))}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_user_error(main)())
