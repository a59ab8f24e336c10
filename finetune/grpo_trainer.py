"""TRL's ``GRPOTrainer`` with rollout tables that W&B can store for vision-language prompts.

With ``log_completions: true``, TRL 1.16 logs each rollout's prompt and completion as chat messages. A VLM
prompt's content mixes an ``{"type": "image"}`` part with ``{"type": "text", "text": ...}`` parts, and W&B's
table type inference rejects such a column ("Data row contained incompatible types"), which stops training
at the first logging step. Here each logged conversation becomes its plain text (an image part as
``<image>``) just before TRL builds the table; the ``completions/*.parquet`` files and the console sample
get the same text. Everything else, the per-reward columns and the advantage included, is TRL's.

With ``dynamic_sampling: true`` the trainer also does DAPO's dynamic sampling (Yu et al. 2025, "DAPO: An
Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476, Sec. 3.2), which TRL 1.16 lacks:
see :class:`DynamicSamplingMixin`.

With ``compiled_decode: true`` the rollout's ``generate`` uses a static KV cache and a compiled decode step
(:meth:`VerituneGRPOTrainer._compile_decode`).

Rollouts never sample a vision special token of the processor (:func:`vision_special_tokens`), with transformers
and with vLLM alike (``core.trl_adapter.ban_rollout_tokens``).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from core import trl_adapter
from core.errors import UserError
from core.trl_adapter import Generated, pack_generated, unpack_generated

logger = logging.getLogger("veritune.grpo")

IMAGE_PLACEHOLDER = "<image>"


def conversation_text(messages: Any) -> str:
    """A logged prompt or completion as plain text: one ``role: text`` line per message.

    >>> conversation_text(
    ...     [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is there a cat?"}]}]
    ... )
    'user: <image> Is there a cat?'
    >>> conversation_text("already text")
    'already text'
    """
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return str(messages)
    lines = []
    for message in messages:
        if not isinstance(message, dict):
            lines.append(str(message))
            continue
        content = message.get("content")
        if isinstance(content, list):
            parts = [
                str(part.get("text", "")) if part.get("type") == "text" else IMAGE_PLACEHOLDER
                for part in content
                if isinstance(part, dict)
            ]
            content = " ".join(part for part in parts if part)
        lines.append(f"{message.get('role', '')}: {content if content is not None else ''}")
    return "\n".join(lines)


# ---- Dynamic sampling (DAPO, Yu et al. 2025, arXiv 2503.14476, Sec. 3.2): train only on informative groups

ROW_INDEX_COLUMN = "veritune_row"  # each training row's index in the dataset: how extra prompts are drawn and excluded


class _Probed(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by ``_generate`` in a probe round, right after generation: TRL has prepared the prompts (images
    included) and generated; padding, processor calls and log-prob passes are left for the final batch."""

    def __init__(self, prompts: list[Any], generated: tuple[Any, ...]) -> None:
        super().__init__("probe round")
        self.prompts = prompts
        self.generated = generated


@dataclass
class _Round:
    """One sampling round, as this process sees it: its rows, what TRL generated for them, the rewards of
    every process's rows (gathered), and each group's reward spread over all processes."""

    rows: list[dict[str, Any]]
    generated: tuple[Any, ...]
    rewards: torch.Tensor  # (processes x local rows, reward functions), gathered
    spread: torch.Tensor  # (processes, local groups): std of the weighted reward sum within each group
    extra_logs: dict[str, list[Any]]


def _take(values: Any, rows: list[int]) -> Any:
    return None if values is None else [values[i] for i in rows]


def _group_rows(group: int, size: int) -> list[int]:
    return list(range(group * size, (group + 1) * size))


class DynamicSamplingMixin:
    """DAPO's dynamic sampling on top of TRL's ``GRPOTrainer`` (recipe keys ``dynamic_sampling``,
    ``dynamic_sampling_min_std``, ``dynamic_sampling_max_rounds``; docs/TRAINING.md, "Dynamic sampling").

    A group whose G completions all earn the same reward has zero advantage and carries no gradient (DAPO
    Sec. 3.2). Each generation batch is sampled and scored by TRL as usual; groups whose reward spread (the
    standard deviation of the weighted reward sum within the group, as TRL computes it) is at most
    ``dynamic_sampling_min_std`` are dropped and replaced by groups of newly drawn prompts, in extra rounds,
    until every process holds its configured number of informative groups or ``dynamic_sampling_max_rounds``
    extra rounds were drawn. Each round draws enough prompts to fill the largest process's deficit at the share
    of informative groups seen so far in the step (a whole batch when none was), at most one configured batch
    per process. (DAPO and verl draw a whole batch each round; drawing only the deficit hit the round limit on
    10 of 15 steps of perf/bench_dynamic_sampling.py, with half the groups informative.) When the rounds run
    out, the step trains on what it has: the informative groups, filled up with the dropped groups of largest
    spread (earliest drawn first), so the batch keeps its configured size in prompts and completions; the log
    counts it (the step line's ``filled``, a summary at the end).

    The batch is then handed to TRL's ``_generate_and_score_completions`` as if it had been generated in one
    go (the completions and rewards are replayed, not generated again), so padding, log-probs, advantages
    and TRL's metrics (``frac_reward_zero_std`` included) are TRL's own, of the batch trained on.

    Extra prompts come from a permutation of the dataset seeded by ``seed`` and the global step, the same on
    every process: process ``p`` takes the ``p``-th slice of each round's draw, and no prompt already in the
    step (on any process) is drawn again. A resumed run therefore draws what an uninterrupted run draws,
    with nothing to store in the checkpoint. Each process's share stays whole groups: a process only ever
    trains on groups it generated itself.
    """

    def _dynamic_setup(self) -> None:
        args = self.args
        self._dynamic_replay: tuple[tuple[Any, ...], torch.Tensor, dict[str, list[Any]]] | None = None
        self._dynamic_probing = False
        if not args.dynamic_sampling:
            return
        unsupported = {
            "rollout_func": self.rollout_func,
            "tools": self.tools,
            "environment_factory": self.environment_factories,
        }
        for name, value in unsupported.items():
            if value:
                raise UserError(f"dynamic_sampling: not supported together with {name} (set dynamic_sampling: false)")

    # -- TRL's hooks, replayed or interrupted during dynamic sampling (their TRL signatures: trl_adapter.GRPO_OVERRIDES)

    def _generate(self, prompts: list[Any]) -> tuple[Any, ...]:
        if self._dynamic_replay is not None:
            return self._dynamic_replay[0]
        generated = super()._generate(prompts)
        if self._dynamic_probing:
            raise _Probed(prompts, generated)
        return generated

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        if self._dynamic_replay is not None:
            _, rewards, extra_logs = self._dynamic_replay
            trl_adapter.put_extra_logs(self, extra_logs)
            return rewards
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.args.dynamic_sampling or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        rows, generated, rewards, extra_logs = self._dynamic_sample(inputs)
        self._dynamic_replay = (generated, rewards, extra_logs)
        try:
            return super()._generate_and_score_completions(rows)
        finally:
            self._dynamic_replay = None

    # -- the sampling rounds

    def _dynamic_probe(self, rows: list[dict[str, Any]]) -> _Round:
        """Generate and score ``rows`` (this process's share of a round) through TRL, without training on them."""
        self._dynamic_probing = True
        try:
            super()._generate_and_score_completions(rows)
        except _Probed as probed:
            prompts, generated = probed.prompts, probed.generated
        else:  # pragma: no cover - TRL always generates
            raise RuntimeError("dynamic sampling: TRL did not generate")
        finally:
            self._dynamic_probing = False
        named = unpack_generated(generated)
        rewards = self._calculate_rewards(rows, prompts, named.completions, named.completion_ids)
        extra_logs = trl_adapter.take_extra_logs(self)
        weighted = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(rewards).all(dim=1)] = torch.nan
        spread = nanstd(weighted.view(-1, self.num_generations), dim=1)
        spread = spread.view(self.accelerator.num_processes, -1).cpu()
        return _Round(rows, generated, rewards, spread, extra_logs)

    def _dynamic_informative(self, spread: torch.Tensor) -> torch.Tensor:
        threshold = self.args.dynamic_sampling_min_std
        return (spread > threshold) & ~torch.isclose(spread, torch.zeros_like(spread))

    def _dynamic_extra_stream(self, used: set[int]) -> Iterator[int]:
        """Dataset rows not yet in this step, in an order fixed by ``seed`` and the global step."""
        generator = torch.Generator().manual_seed(int(self.args.seed) * 1_000_003 + int(self.state.global_step))
        for index in torch.randperm(len(self.train_dataset), generator=generator).tolist():
            if index not in used:
                yield index

    def _dynamic_sample(
        self, inputs: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], tuple[Any, ...], torch.Tensor, dict[str, list[Any]]]:
        group_size = self.num_generations
        processes, rank = self.accelerator.num_processes, self.accelerator.process_index
        wanted = len(inputs) // group_size  # groups per process
        device = self.accelerator.device
        own = torch.tensor([int(inputs[g * group_size][ROW_INDEX_COLUMN]) for g in range(wanted)], device=device)
        used = set(self.accelerator.gather(own).tolist())
        stream = self._dynamic_extra_stream(used)

        rounds = [self._dynamic_probe(inputs)]
        # Per process: the (round, group) pairs that are informative, in the order drawn.
        kept: list[list[tuple[int, int]]] = [[] for _ in range(processes)]
        exhausted = False
        while True:
            informative = self._dynamic_informative(rounds[-1].spread)
            for process in range(processes):
                kept[process] += [(len(rounds) - 1, g) for g in informative[process].nonzero().flatten().tolist()]
            deficit = max(wanted - len(groups) for groups in kept)
            if deficit <= 0 or len(rounds) > self.args.dynamic_sampling_max_rounds:
                break
            # Enough prompts to fill the largest deficit at the share of informative groups seen so far in this
            # step (a whole batch when none was), at most one configured batch per process.
            seen = sum(found.spread.numel() for found in rounds)
            share = sum(len(groups) for groups in kept) / seen
            size = wanted if share == 0 else min(wanted, max(deficit, math.ceil(deficit / share)))
            drawn = list(itertools.islice(stream, size * processes))
            if len(drawn) < size * processes:
                exhausted = True
                break
            mine = drawn[rank * size : (rank + 1) * size]
            rows = [dict(row) for index in mine for row in itertools.repeat(self.train_dataset[index], group_size)]
            rounds.append(self._dynamic_probe(rows))

        # This process's batch: its first `wanted` informative groups, filled with its dropped groups of largest
        # spread (earliest drawn first) when the rounds ran out. Every process computes every process's choice
        # (the spreads are gathered), which is what the gathered rewards of the batch are built from.
        def choose(process: int) -> list[tuple[int, int]]:
            chosen = kept[process][:wanted]
            if len(chosen) < wanted:
                taken = set(chosen)
                dropped = [
                    (r, g)
                    for r, found in enumerate(rounds)
                    for g in range(found.spread.shape[1])
                    if (r, g) not in taken
                ]
                dropped.sort(key=lambda rg: -float(torch.nan_to_num(rounds[rg[0]].spread[process, rg[1]], nan=-1.0)))
                chosen += dropped[: wanted - len(chosen)]
            return sorted(chosen)

        choices = [choose(process) for process in range(processes)]
        rows_out: list[dict[str, Any]] = []
        local: list[list[int]] = [[] for _ in rounds]  # per round: this process's rows chosen
        for r, g in choices[rank]:
            local[r] += _group_rows(g, group_size)
        for r, chosen_rows in enumerate(local):
            rows_out += _take(rounds[r].rows, chosen_rows)
        generated = self._dynamic_join(rounds, local)
        reward_blocks = []
        for process in range(processes):
            for r, found in enumerate(rounds):
                per_process = len(found.rows)
                picked = [
                    process * per_process + i
                    for r2, g in choices[process]
                    if r2 == r
                    for i in _group_rows(g, group_size)
                ]
                reward_blocks.append(found.rewards[picked])
        rewards = torch.cat(reward_blocks)
        extra_logs: dict[str, list[Any]] = {}
        for column in sorted({c for found in rounds for c in found.extra_logs}):
            extra_logs[column] = [
                value
                for found, chosen_rows in zip(rounds, local, strict=True)
                for value in _take(found.extra_logs.get(column, [None] * len(found.rows)), chosen_rows)
            ]

        # Per-step metrics (TRL averages them over the logging steps and sends them where its logs go).
        drawn_groups = sum(found.spread.numel() for found in rounds)
        informative_groups = sum(int(self._dynamic_informative(found.spread).sum()) for found in rounds)
        filled = sum(max(0, wanted - len(groups)) for groups in kept)
        metrics = trl_adapter.train_metrics(self)
        metrics["dynamic_sampling/kept_share"].append(informative_groups / drawn_groups)
        metrics["dynamic_sampling/rounds"].append(float(len(rounds)))
        metrics["dynamic_sampling/prompts_drawn"].append(float(drawn_groups))
        metrics["dynamic_sampling/filled_groups"].append(float(filled))
        self._dynamic_count_filled(filled, exhausted)
        return rows_out, generated, rewards, extra_logs

    def _dynamic_count_filled(self, filled: int, exhausted: bool) -> None:
        """Count a step's filled groups for the end-of-run summary (the step line shows ``filled``)."""
        summary = self.__dict__.setdefault("_dynamic_summary", {"steps": 0, "filled_steps": 0, "filled_groups": 0})
        summary["steps"] += 1
        if filled:
            summary["filled_steps"] += 1
            summary["filled_groups"] += filled
            summary["exhausted_steps"] = summary.get("exhausted_steps", 0) + int(exhausted)

    def dynamic_sampling_summary(self) -> str | None:
        """One line on what dynamic sampling did over the run (None when it was off or ran no step)."""
        summary = getattr(self, "_dynamic_summary", None)
        if not self.args.dynamic_sampling or not summary or not summary["steps"]:
            return None
        line = f"dynamic sampling: {summary['steps']} generation batch(es)"
        if not summary["filled_steps"]:
            return line + "; every one filled with informative groups"
        exhausted = summary.get("exhausted_steps", 0)
        reasons = []
        if summary["filled_steps"] - exhausted:
            reasons.append(
                f"{summary['filled_steps'] - exhausted} reached dynamic_sampling_max_rounds "
                f"({self.args.dynamic_sampling_max_rounds})"
            )
        if exhausted:
            reasons.append(f"{exhausted} ran out of prompts")
        return (
            f"{line}; {summary['filled_steps']} were filled with {summary['filled_groups']} group(s) of reward "
            f"spread <= {self.args.dynamic_sampling_min_std:g} ({', '.join(reasons)}; the step lines' `filled`)"
        )

    @staticmethod
    def _dynamic_join(rounds: list[_Round], local: list[list[int]]) -> tuple[Any, ...]:
        """TRL's ``_generate`` output for the chosen rows of each round, in order (one tuple, as if one call)."""
        generated = [unpack_generated(found.generated) for found in rounds]
        joined: dict[str, Any] = {}
        for name in Generated._fields:
            parts = [getattr(found, name) for found in generated]
            if name == "extra_fields":  # only rollout_func fills them (refused with dynamic sampling)
                joined[name] = {}
            elif name == "tool_images":  # only tools fill them (refused)
                joined[name] = []
            elif all(part is None for part in parts):
                joined[name] = None
            else:
                joined[name] = [
                    v
                    for part, rows in zip(parts, local, strict=True)
                    for v in (_take(part, rows) if part is not None else [None] * len(rows))
                ]
        return pack_generated(Generated(**joined))


VISION_WORDS = ("image", "video", "vision")  # a tokenizer's special tokens naming these are vision tokens


def vision_special_tokens(processor: Any) -> dict[str, int]:
    """The processor's vision special tokens (text to id), which a completion must never hold.

    Each ``*_token`` the processor names (Qwen-VL: ``<|image_pad|>``, ``<|video_pad|>``, ``<|vision_start|>``,
    ``<|vision_end|>``) and each special token of its tokenizer whose text names an image, a video or vision
    (Qwen-VL's ``<|vision_pad|>``); never the tokenizer's end-of-sequence, padding or start token. Empty for a
    plain tokenizer. A sampled vision token makes the training forward count more image tokens than image
    features ("Image features and image tokens do not match").
    """
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None:
        return {}
    named = [value for key, value in vars(processor).items() if key.endswith("_token") and isinstance(value, str)]
    special = [token.content for token in tokenizer.added_tokens_decoder.values() if token.special]
    special = [text for text in special if any(word in text.lower() for word in VISION_WORDS)]
    kept = {tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.unk_token_id, None}
    tokens: dict[str, int] = {}
    for text in [*named, *special]:
        token_id = tokenizer.convert_tokens_to_ids(text)
        if isinstance(token_id, int) and token_id not in kept:
            tokens.setdefault(text, token_id)
    return tokens


def keep_one_input_grad_hook(model: Any) -> None:
    """Make re-enabling gradient checkpointing replace the input-embedding hook instead of adding one more.

    transformers 5.20's ``gradient_checkpointing_enable`` registers a new ``make_inputs_require_grads`` forward
    hook on the input embeddings each time it runs, and ``gradient_checkpointing_disable`` removes it only under
    PEFT. TRL turns checkpointing off and on around every rollout, so a full-parameter run gains one hook per
    rollout: every forward (each decode step included) runs all of them, and a compiled decode is recompiled at
    every rollout (torch.compile guards on the hook count)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    enable = getattr(base, "enable_input_require_grads", None)
    if enable is None or not hasattr(base, "disable_input_require_grads"):
        return

    def enable_once() -> None:
        base.disable_input_require_grads()
        enable()

    base.enable_input_require_grads = enable_once


class VerituneGRPOTrainer(DynamicSamplingMixin, GRPOTrainer):
    """``GRPOTrainer`` whose completion tables hold text, with optional dynamic sampling (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        trl_adapter.check_trl_version()  # the overrides below are TRL 1.16.0's private methods
        config = kwargs.get("args")
        dataset = kwargs.get("train_dataset")
        if getattr(config, "dynamic_sampling", False) and dataset is not None:
            if not isinstance(dataset, Dataset):
                raise UserError("dynamic_sampling: needs a map-style dataset (extra prompts are drawn by index)")
            kwargs["train_dataset"] = dataset.add_column(ROW_INDEX_COLUMN, list(range(len(dataset))))
        super().__init__(*args, **kwargs)
        trl_adapter.ban_rollout_tokens(self, vision_special_tokens(self.processing_class))
        self._dynamic_setup()
        keep_one_input_grad_hook(self.model)
        if getattr(self.args, "compiled_decode", False):
            self._compile_decode()

    def _compile_decode(self) -> None:
        """``compiled_decode``: TRL's ``GenerationConfig`` with a static KV cache and a compiled decode step.

        TRL 1.16 builds the config with ``disable_compile=True``; transformers' ``generate`` compiles the
        decode step (``get_compiled_call``; the prefill stays eager) only with a compileable cache, on CUDA/XPU
        unless ``CompileConfig._compile_all_devices`` is set, which the recipe key sets so that it means the
        same on every device. ``dynamic=False``: a new cache shape gets its own graph, not a dynamic one that
        CUDA graphs cannot capture. The prompt bucket (``pad_to_multiple_of``, set by the config) keeps the
        cache shape fixed; transformers keeps the longest cache seen, so a longer bucket recompiles once."""
        from transformers import CompileConfig

        compile_config = CompileConfig(fullgraph=False, dynamic=False, mode="reduce-overhead")
        compile_config._compile_all_devices = True
        self.generation_config.cache_implementation = "static"
        self.generation_config.disable_compile = False
        self.generation_config.compile_config = compile_config
        self.generation_kwargs["cache_implementation"] = "static"  # TRL also writes these onto the model's config

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.log_completions:
            for key in ("prompt", "completion"):
                column = trl_adapter.logged_column(self, key)
                if any(not isinstance(entry, str) for entry in column):
                    texts = [conversation_text(entry) for entry in column]
                    column.clear()
                    column.extend(texts)
        super().log(logs, start_time)
        if self.state.log_history:  # TRL adds its metrics (frac_reward_zero_std) to the logs in its own log()
            self._watch_reward_spread(self.state.log_history[-1])

    def _watch_reward_spread(self, logs: dict[str, float]) -> None:
        """Warn once when ``no_spread_warning_steps`` consecutive steps had no reward spread at all."""
        share = logs.get("frac_reward_zero_std")
        if share is None:
            return
        last = getattr(self, "_spread_last_step", 0)
        self._spread_last_step = self.state.global_step
        if share < 1.0:
            self._no_spread_steps = 0
            return
        self._no_spread_steps = getattr(self, "_no_spread_steps", 0) + self.state.global_step - last
        limit = self.args.no_spread_warning_steps
        if limit and self._no_spread_steps >= limit and not getattr(self, "_no_spread_warned", False):
            self._no_spread_warned = True
            if self.accelerator.is_main_process:
                logger.warning(
                    "no learning signal: in the last %d steps every group's %d completions earned the same reward "
                    "(reward %s, frac_reward_zero_std 1): zero advantage, no gradient. Check that the model's "
                    "answers can earn the rewards (reward_funcs, prompt_template; a random-initialised model earns "
                    "none), or raise temperature or num_generations, or set dynamic_sampling: true "
                    "(no_spread_warning_steps: %d; 0 turns this off)",
                    self._no_spread_steps,
                    self.num_generations,
                    f"{logs['reward']:.3g}" if isinstance(logs.get("reward"), (int, float)) else "?",
                    limit,
                )

    def train(self, *args: Any, **kwargs: Any) -> Any:
        result = super().train(*args, **kwargs)
        summary = self.dynamic_sampling_summary()
        if summary and self.accelerator.is_main_process:
            logger.info(summary)
        return result
