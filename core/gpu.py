"""What the GPU-only paths need, checked before any model loads: vLLM importable and a CUDA GPU visible.

vLLM's wheels are CUDA builds (`pip install -e '.[vllm]'`); a recipe with ``use_vllm: true`` or
``veritune eval run --backend vllm`` on a machine without vLLM, or without a GPU, would otherwise fail
minutes later inside TRL or vLLM with a long traceback.
"""

from __future__ import annotations

import importlib.util

from core.errors import UserError

VLLM_INSTALL = "pip install -e '.[vllm]'"


def vllm_installed() -> bool:
    """True when the ``vllm`` package can be imported here (without importing it: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def cuda_available() -> bool:
    """True when torch sees a CUDA GPU."""
    import torch

    return bool(torch.cuda.is_available())


def require_vllm(source: str, fallback: str) -> None:
    """One-line error unless vLLM is installed and a CUDA GPU is visible.

    Args:
        source: the key or flag that asked for vLLM (``use_vllm``, ``--backend vllm``).
        fallback: what to do instead, for the message (``set use_vllm: false``).

    Raises:
        UserError: ``"<source>: vLLM is not installed here (...); <fallback>"`` or ``"<source>: vLLM needs a
            CUDA GPU and none is visible here (...); <fallback>"``.
    """
    if not vllm_installed():
        raise UserError(f"{source}: vLLM is not installed here ({VLLM_INSTALL}, on a GPU machine); {fallback}")
    if not cuda_available():
        raise UserError(
            f"{source}: vLLM needs a CUDA GPU and none is visible here (torch.cuda.is_available() is False); {fallback}"
        )
