"""Every TRL private name veritune relies on, in one place (docs/ARCHITECTURE.md, "TRL's private internals").

TRL's ``GRPOTrainer`` offers no public hook for what veritune adds (text rollout tables, DAPO's dynamic sampling, a
compiled decode), so veritune overrides some of its private methods and reads some of its private attributes; the
CPU-speed plugins of the recipes' ``plugins:`` (docs/TRAINING.md, "Plugins") also patch one private function and
set one private flag. This module names each of them: the production code goes through the functions and names
below and never spells a TRL private name itself, and ``tests/test_trl_contract.py`` checks each name, signature
and the order of ``_generate``'s tuple against the installed TRL, so an upgrade fails there, naming what moved,
before a run fails halfway. It lives in the bottom layer because both ``finetune/`` (the trainers) and
``eval_hooks/`` (the colocated vLLM engine) need it; it imports TRL only inside its functions, so importing it
costs nothing.

On a TRL upgrade: install the new TRL, run ``pytest tests/test_trl_contract.py``, update what it names here
(and the overrides in ``finetune/grpo_trainer.py``), then :data:`REQUIRED_TRL` and pyproject's pin together.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any, NamedTuple

from core.errors import UserError

# The one TRL release this adapter was written against and checked by tests/test_trl_contract.py (pyproject
# pins the same): TRL changes its private methods between releases, patch releases included.
REQUIRED_TRL = "1.16.0"

# GRPOTrainer's private methods veritune overrides (finetune/grpo_trainer.py, DynamicSamplingMixin), with the
# parameter names (``self`` first) TRL 1.16.0 defines and calls them with.
GRPO_OVERRIDES: dict[str, tuple[str, ...]] = {
    "_generate": ("self", "prompts"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("self", "inputs"),
}

# GRPOTrainer's instance attributes veritune reads or writes, each set in TRL's ``GRPOTrainer.__init__``:
# the metrics, the rollout-table columns and the per-sample reward logs (the accessors below), the
# generation settings that ``compiled_decode`` rewrites (VerituneGRPOTrainer._compile_decode) and that
# :func:`ban_rollout_tokens` extends, and the vLLM backend (with ``use_vllm``).
GRPO_ATTRIBUTES: tuple[str, ...] = (
    "_metrics",
    "_logs",
    "_pending_extra_logs",
    "generation_config",
    "generation_kwargs",
    "vllm_generation",
)

# ``trl.generation.vllm_generation.VLLMGeneration``'s flag that the colocated engine's weights are asleep (level 2
# dropped them): set, its next ``generate`` calls ``sync_weights`` first, which wakes them and pushes the weights.
VLLM_SLEEP_FLAG = "_llm_weights_sleeping"


class UnsupportedTRL(UserError):
    """The installed TRL is not the release this adapter was written for."""


def installed_trl() -> str:
    """The installed TRL's version string."""
    from importlib.metadata import version

    return version("trl")


def check_trl_version(installed: str | None = None) -> None:
    """Refuse, in one line, a TRL other than :data:`REQUIRED_TRL` (called where the trainers are built).

    Raises:
        UnsupportedTRL: another TRL is installed.
    """
    installed = installed_trl() if installed is None else installed
    if installed != REQUIRED_TRL:
        raise UnsupportedTRL(
            f"trl {installed} installed; veritune's TRL adapter is written for {REQUIRED_TRL}: "
            f"pip install trl=={REQUIRED_TRL}"
        )


# ---- GRPOTrainer._generate's output


class Generated(NamedTuple):
    """``GRPOTrainer._generate``'s tuple, by name, in TRL 1.16.0's return order."""

    prompt_ids: Any  # list of token-id lists, one per row
    completion_ids: Any  # list of token-id lists, one per row
    tool_mask: Any  # None unless tools or rollout_func's env_mask
    completions: Any  # decoded completions (text, or one assistant message per row)
    logprobs: Any  # sampling log-probs per token (None without vLLM or rollout_func)
    extra_fields: Any  # dict: rollout_func's further keys ({} otherwise)
    images: Any  # per-row images (None for text prompts)
    tool_images: Any  # list: images returned by tools ([] without tools)


def unpack_generated(generated: tuple[Any, ...]) -> Generated:
    """Name the fields of ``GRPOTrainer._generate``'s tuple."""
    if len(generated) != len(Generated._fields):
        raise RuntimeError(
            f"TRL's GRPOTrainer._generate returned {len(generated)} values, veritune's adapter expects "
            f"{len(Generated._fields)} ({', '.join(Generated._fields)}): run tests/test_trl_contract.py and update "
            "core/trl_adapter.py for this TRL"
        )
    return Generated(*generated)


def pack_generated(generated: Generated) -> tuple[Any, ...]:
    """The plain tuple TRL's ``_generate_and_score_completions`` unpacks."""
    return tuple(generated)


# ---- GRPOTrainer's metrics and logs


def train_metrics(trainer: Any) -> dict[str, list[float]]:
    """The trainer's training metrics: each key's values since the last log, averaged by TRL's ``log``."""
    return trainer._metrics["train"]


def logged_column(trainer: Any, key: str) -> MutableSequence[Any]:
    """A column of the rollout table TRL logs with ``log_completions`` (``"prompt"``, ``"completion"``, ...)."""
    return trainer._logs[key]


def take_extra_logs(trainer: Any) -> dict[str, list[Any]]:
    """The per-sample reward logs (``log_extra`` of the reward functions) of the last ``_calculate_rewards``,
    taken away from the trainer (TRL would add them to its table at its next scoring)."""
    pending = trainer._pending_extra_logs
    taken = {column: list(values) for column, values in pending.items()}
    pending.clear()
    return taken


def put_extra_logs(trainer: Any, extra_logs: dict[str, list[Any]]) -> None:
    """Make ``extra_logs`` the per-sample reward logs TRL adds to its table (replacing any pending)."""
    pending = trainer._pending_extra_logs
    pending.clear()
    pending.update(extra_logs)


# ---- TRL's colocated vLLM engine


def mark_vllm_weights_sleeping(generation: Any) -> None:
    """Tell TRL's ``VLLMGeneration`` that its engine's weights were put to sleep (``llm.sleep(level=2)`` drops
    them), so that its next ``generate`` pushes the training model's weights again first, as after a rollout."""
    setattr(generation, VLLM_SLEEP_FLAG, True)


# ---- The tokens a rollout may not sample

# ``VLLMGeneration``'s ``SamplingParams`` extras: TRL adds them to every colocated ``SamplingParams`` and sends them
# with every request to a ``trl vllm-serve`` server (``vllm_client.generate``'s ``generation_kwargs``).
VLLM_SAMPLING_EXTRAS = "generation_kwargs"


def ban_rollout_tokens(trainer: Any, tokens: dict[str, int]) -> None:
    """Keep ``trainer``'s rollouts from sampling ``tokens`` (text to id) on the generation path it uses.

    With transformers, TRL 1.16 suppresses the image token (``suppress_tokens`` of its ``GenerationConfig``,
    ``model.config.image_token_id``); the ids are added to that list. With vLLM it bans nothing: the texts go
    into vLLM's ``bad_words`` (each one token, masked to -inf at every step), for a colocated engine and a
    server alike. What the recipe's ``generation_kwargs`` already bans stays banned.
    """
    if not tokens:
        return
    if getattr(trainer, "use_vllm", False):
        extras = getattr(trainer.vllm_generation, VLLM_SAMPLING_EXTRAS)
        words = list(extras.get("bad_words") or [])
        extras["bad_words"] = words + [text for text in tokens if text not in words]
        return
    suppressed = list(trainer.generation_config.suppress_tokens or [])
    suppressed += [token_id for token_id in tokens.values() if token_id not in suppressed]
    trainer.generation_config.suppress_tokens = suppressed
    trainer.generation_kwargs["suppress_tokens"] = suppressed  # TRL also writes these onto the model's config


# ---- Names the CPU-speed plugins use (docs/TRAINING.md, "Plugins")

# ``trl.trainer.utils``'s name for "this device scores only the labelled positions" in its fused LM head
# (``add_fused_lm_head``), imported there from ``trl.kernels.chunked_logprob``.
COMPACT_LM_HEAD_CHECK = "_use_triton"

# ``DPOTrainer``'s attribute that makes ``_compute_loss`` read the reference log-probs from the batch (the keys
# below) instead of running the reference model; TRL sets it only from ``precompute_ref_log_probs``, which it
# refuses for vision-language datasets.
DPO_PRECOMPUTED_FLAG = "precompute_ref_logps"
DPO_REFERENCE_KEYS = ("ref_chosen_logps", "ref_rejected_logps")
# the batch keys ``_compute_loss`` keeps out of the model's arguments (its ``_non_model_keys``)
DPO_NON_MODEL_KEYS = frozenset({"completion_mask", *DPO_REFERENCE_KEYS})
