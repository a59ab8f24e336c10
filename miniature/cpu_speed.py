"""The miniature's CPU-speed plugins: what makes its CPU runs faster without changing their numbers.

A recipe turns each on by listing its dotted path under ``plugins:`` (``recipes/miniature/*.yaml``;
docs/TRAINING.md, "Plugins"); ``finetune.training.apply_plugins`` calls it with the built trainer just before
``train``. The paper recipes list none: on a GPU none of them would change anything but the run's speed, if that.

- :func:`compact_lm_head`: TRL's fused LM head scores only the labelled positions on the CPU too.
- :func:`foreach_adamw`: torch's AdamW in its multi-tensor (foreach) kernels on the CPU.
- :func:`reference_in_workers`: full-parameter DPO's frozen reference runs in the data loader's workers.

The TRL private names they touch are named in :mod:`core.trl_adapter` (checked by ``tests/test_trl_contract.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from core.errors import UserError
from core.trl_adapter import COMPACT_LM_HEAD_CHECK, DPO_NON_MODEL_KEYS, DPO_PRECOMPUTED_FLAG, DPO_REFERENCE_KEYS

# ---- TRL's fused LM head


def set_cpu_compact_lm_head(enabled: bool) -> None:
    """With ``enabled``, TRL's fused LM head scores only the labelled positions on the CPU too; without, TRL's
    own rule (only on Triton devices) is restored. Idempotent.

    ``trl.trainer.utils.add_fused_lm_head`` projects only the positions whose label is not -100 on devices with
    Triton; elsewhere it projects every position and zeroes the unlabelled ones, so that a compiler (Neuron, XLA)
    sees one tile shape per sequence length. Eager CPU compiles nothing, and in a vision-language batch most
    positions are image and prompt tokens, projected only to be zeroed (docs/PERFORMANCE.md, "cpu_training"). The
    log-probabilities are the same up to float rounding. A TRL without the check leaves its own behaviour.
    """
    import trl.trainer.utils as trl_utils

    current: Callable[[Any], bool] | None = getattr(trl_utils, COMPACT_LM_HEAD_CHECK, None)
    if current is None:
        return
    original = getattr(current, "veritune_original", None)
    if not enabled:
        if original is not None:
            setattr(trl_utils, COMPACT_LM_HEAD_CHECK, original)
        return
    if original is not None:
        return
    trl_check = current

    def compact_on(device: Any) -> bool:
        return trl_check(device) or device.type == "cpu"

    compact_on.veritune_original = trl_check  # type: ignore[attr-defined]
    setattr(trl_utils, COMPACT_LM_HEAD_CHECK, compact_on)


class RestoreLMHead(TrainerCallback):
    """Restores TRL's own LM-head rule when training ends, so a later run of the process follows its own recipe."""

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        set_cpu_compact_lm_head(False)


def compact_lm_head(trainer: Any) -> None:
    """Plugin: TRL's fused LM head scores only the labelled positions on the CPU for this run
    (:func:`set_cpu_compact_lm_head`); on a GPU with Triton it does so already."""
    set_cpu_compact_lm_head(True)
    trainer.add_callback(RestoreLMHead())


# ---- torch's AdamW on the CPU


def foreach_adamw(trainer: Any) -> bool:
    """Plugin: have the trainer build torch's AdamW with ``foreach=True`` when it trains on the CPU with ``optim:
    adamw_torch`` and builds its own optimizer (no DeepSpeed, none passed in); True when it will.

    torch picks its multi-tensor (foreach) AdamW by default only on accelerators; on the CPU it loops over the
    parameters in Python, a dozen small kernel calls per tensor. The foreach kernels apply the same elementwise
    operations in the same order, so the weights come out the same bit for bit (``tests/test_cpu_optimizer.py``;
    docs/PERFORMANCE.md, "cpu_optimizer"). ``Trainer.optimizer_cls_and_kwargs`` is the Trainer's own argument for
    the optimizer's class and keyword arguments.
    """
    args = trainer.args
    if (
        args.optim != "adamw_torch"
        or args.device.type != "cpu"
        or getattr(trainer, "is_deepspeed_enabled", False)
        or trainer.optimizer is not None
        or trainer.optimizer_cls_and_kwargs is not None
    ):
        return False
    optimizer_cls, kwargs = trainer.get_optimizer_cls_and_kwargs(args, trainer.model)
    trainer.optimizer_cls_and_kwargs = (optimizer_cls, {**kwargs, "foreach": True})
    return True


# ---- DPOTrainer's reference log-probs, computed by the data loader's workers


class ReferenceLogpsCollator:
    """A DPO data collator that also runs the frozen reference model on each batch it collates and adds the
    reference's summed completion log-probs (``ref_chosen_logps``, ``ref_rejected_logps``) to it.

    In a data loader worker this moves the reference forward out of the training step: the worker computes the
    next batches' reference while the main process trains on this one. The reference call is the one
    ``DPOTrainer._compute_loss`` makes (the same arguments, labels and fused LM head, no gradient), on the same
    collated tensors, so the log-probs are the same numbers (each operation runs on one thread in the worker; the
    miniature's trained weights come out the same bytes, ``perf/bench_cpu_training.py``).
    """

    def __init__(self, collator: Callable[[list[dict[str, Any]]], dict[str, Any]], reference: Any) -> None:
        self.collator, self.reference = collator, reference

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        batch = self.collator(examples)
        kwargs = {key: value for key, value in batch.items() if key not in DPO_NON_MODEL_KEYS}
        completion_mask = batch["completion_mask"]
        labels = batch["input_ids"].masked_fill(completion_mask == 0, -100)
        with torch.no_grad():
            outputs = self.reference(**kwargs, use_cache=False, labels=labels, fused_lm_head=True)
        logps = outputs.log_probs[:, -(completion_mask.size(1) - 1) :].sum(dim=1)
        batch[DPO_REFERENCE_KEYS[0]], batch[DPO_REFERENCE_KEYS[1]] = logps.chunk(2, dim=0)
        return batch


PLUGIN = "miniature.cpu_speed.reference_in_workers"


def reference_in_workers(trainer: Any) -> None:
    """Plugin: make ``trainer`` (a full-parameter ``DPOTrainer`` with its frozen ``ref_model``) take the reference
    log-probs from its batches, computed by :class:`ReferenceLogpsCollator` (in the data loader's workers when
    it has any), instead of running the reference in its training step.

    Raises:
        UserError: the run has no separate reference model (LoRA), its reference is not on the CPU, or it uses
            TRL's length-desensitised log-probs (``ld_alpha``), which this collator does not compute.
    """
    if getattr(trainer, "ref_model", None) is None:
        raise UserError(
            f"plugins: {PLUGIN} needs a full-parameter DPO run (a frozen reference copy); with LoRA the reference "
            "is the policy itself, adapter off"
        )
    if trainer.ld_alpha is not None:
        raise UserError(f"plugins: {PLUGIN} does not compute ld_alpha's log-probs; leave ld_alpha unset")
    reference = trainer.accelerator.unwrap_model(trainer.ref_model)
    if next(reference.parameters()).device.type != "cpu":
        raise UserError(f"plugins: {PLUGIN} is for CPU runs only (a data loader worker cannot run a model on a GPU)")
    reference.eval()
    trainer.data_collator = ReferenceLogpsCollator(trainer.data_collator, reference)
    setattr(trainer, DPO_PRECOMPUTED_FLAG, True)
    workers = trainer.args.dataloader_num_workers
    where = f"its {workers} data loader worker(s)" if workers else "the collator (dataloader_num_workers: 0)"
    logging.getLogger("veritune.dpo").info("reference_in_workers: the frozen reference runs in %s", where)
