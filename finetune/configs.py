"""Recipe dataclasses: the fields a recipe may set, beyond TRL's own ``GRPOConfig``/``DPOConfig`` and
``ModelConfig``.

A recipe is a flat YAML file whose keys map one-to-one onto these dataclasses (see
:func:`finetune.recipe.parse_recipe`). Only what TRL does not already have is added here.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from trl import DPOConfig, GRPOConfig, ModelConfig, SFTConfig

from core.errors import UserError
from eval_hooks.selection import DEFAULT_LIMIT_MODE, DEFAULT_LIMIT_SEED, LIMIT_MODES

# What the eval hooks may generate with (ScriptArguments.eval_backend; eval_hooks/callback.py).
EVAL_BACKENDS = ("auto", "transformers", "vllm")


def require_at_least(config: object, key: str, lowest: float, *, exclusive: bool = False) -> None:
    """A key's lower bound, checked in the ``__post_init__`` of the dataclass that owns the key: one line when
    ``config.<key>`` is below ``lowest`` (``exclusive``: at or below it); None (unset) passes."""
    value = getattr(config, key)
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (value <= lowest if exclusive else value < lowest)
    ):
        bound = f"greater than {lowest:g}" if exclusive else f"at least {lowest:g}"
        raise UserError(f"{key}: must be {bound}, got {value}")


class TrainingArgumentsChecks:
    """The checks of TRL's own ``TrainingArguments`` keys that every entry script's config shares (GRPO, DPO,
    SFT), made first in its ``__post_init__``, before TRL's (which divides by some of them)."""

    def check_training_arguments(self) -> None:
        """Learning rate, batch sizes, steps and epochs a run can start with; persistent data workers need one."""
        for key in ("learning_rate", "weight_decay", "max_grad_norm", "num_train_epochs"):
            require_at_least(self, key, 0)
        if hasattr(self, "beta"):  # GRPO's and DPO's KL coefficient
            require_at_least(self, "beta", 0)
        for key in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
            require_at_least(self, key, 1)
        for key in ("save_steps", "logging_steps"):
            require_at_least(self, key, 0, exclusive=True)
        if self.dataloader_persistent_workers and self.dataloader_num_workers == 0:
            raise UserError(  # else torch's DataLoader raises it as a traceback once the model is loaded
                "dataloader_persistent_workers: true needs dataloader_num_workers of 1 or more, got 0 "
                "(with --dataloader_num_workers 0 also pass --dataloader_persistent_workers false)"
            )


@dataclass
class VerituneModelConfig(ModelConfig):
    """TRL's ``ModelConfig`` plus the switches that keep LoRA adapters off the vision tower and keep the vision
    tower fixed."""

    lora_language_model_only: bool = field(
        default=True,
        metadata={"help": "Put LoRA adapters on the language model only, never on the vision tower."},
    )
    freeze_vision_tower: bool = field(
        default=False,
        metadata={"help": "Freeze the vision encoder and its projector (ms-swift's `freeze_vit`): only the LM trains."},
    )

    vision_feature_cache: bool = field(
        default=False,
        metadata={"help": "With freeze_vision_tower: compute the tower's features once per image, kept in memory."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vision_feature_cache and not self.freeze_vision_tower:
            raise UserError(
                "vision_feature_cache: needs freeze_vision_tower: true (a tower that trains changes its features)"
            )
        if self.freeze_vision_tower and self.use_peft and not self.lora_language_model_only:
            raise UserError(
                "freeze_vision_tower: with use_peft and lora_language_model_only: false, LoRA adapters may sit on the "
                "vision tower and train it; set lora_language_model_only: true or drop freeze_vision_tower"
            )


@dataclass
class ScriptArguments:
    """Data, logging and evaluation settings shared by every entry script."""

    recipe: str | None = field(
        default=None,
        metadata={"help": "The recipe file this run was parsed from (set by the parser)."},
    )
    dataset_path: str | None = field(
        default=None,
        metadata={"help": "Training data: JSON, JSON lines, parquet or a save_to_disk folder (docs/DATA_FORMATS.md)."},
    )
    # TRL's ScriptArguments spelling (as open-r1's recipes write it): a Hub dataset instead of dataset_path.
    dataset_name: str | None = field(
        default=None, metadata={"help": "A Hub dataset id, loaded by datasets.load_dataset (instead of dataset_path)."}
    )
    dataset_config: str | None = field(
        default=None, metadata={"help": "The Hub dataset's configuration name (load_dataset's `name`)."}
    )
    dataset_train_split: str = field(default="train", metadata={"help": "The split to train on."})
    dataset_test_split: str = field(
        default="test", metadata={"help": "The split to evaluate on (DPO with eval_strategy, a Hub dataset)."}
    )
    image_root: str | None = field(
        default=None, metadata={"help": "Directory the dataset's relative image paths are resolved against."}
    )
    max_pixels: int = field(
        default=1280 * 28 * 28,
        metadata={"help": "Images with more pixels are scaled down, aspect ratio kept."},
    )
    max_pixels_per_image: int | None = field(
        default=None,
        metadata={"help": "Pixel budget of each image of a multi-image prompt (default: max_pixels / image count)."},
    )
    max_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train on at most N examples: a seeded uniform sample, kept in file order."},
    )
    skip_bad_examples: bool = field(
        default=False,
        metadata={"help": "Drop rows whose image is missing or unreadable instead of stopping before training."},
    )
    plugins: list[str] = field(
        default_factory=list,
        metadata={"help": "Dotted paths of functions f(trainer) applied before training (docs/TRAINING.md, Plugins)."},
    )
    accelerate_config: str | None = field(
        default=None,
        metadata={"help": "The accelerate config this recipe is meant for (read by the Slurm scripts)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Remove the run in output_dir and train from step 0 (default: resume it; docs/SCALING.md)."},
    )
    wandb_project: str | None = field(default=None, metadata={"help": "W&B project (else WANDB_PROJECT)."})
    wandb_group: str | None = field(default=None, metadata={"help": "W&B run group."})
    wandb_tags: list[str] = field(default_factory=list, metadata={"help": "W&B run tags."})
    # Eval hooks: rerun benchmarks on every saved checkpoint.
    eval_benchmarks: list[str] = field(
        default_factory=list, metadata={"help": "Benchmarks to run after each checkpoint save (e.g. oric_bench)."}
    )
    eval_on_save: bool = field(default=False, metadata={"help": "Evaluate each checkpoint as it is saved."})
    eval_final_benchmarks: list[str] = field(
        default_factory=list,
        metadata={"help": "Benchmarks (or presets such as general) to run once, after the final checkpoint."},
    )
    eval_at_start: bool = field(
        default=False,
        metadata={"help": "With eval_on_save: also evaluate the model before the first step (step-0 baseline)."},
    )
    eval_data_root: str | None = field(
        default=None, metadata={"help": "Directory holding the benchmarks' files (see docs/DATA_FORMATS.md)."}
    )
    eval_data: list[str] = field(
        default_factory=list,
        metadata={"help": "Explicit benchmark files as BENCHMARK=PATH (instead of eval_data_root's layout)."},
    )
    eval_image_root: str | None = field(default=None, metadata={"help": "Images of the eval_data files."})
    eval_limit: int | None = field(
        default=None,
        metadata={
            "help": "Evaluate at most N questions per benchmark: a seeded stratified sample (docs/EVALUATION.md)."
        },
    )
    eval_limit_seed: int = field(
        default=DEFAULT_LIMIT_SEED, metadata={"help": "Seed of the eval limit's sample (same seed: same items)."}
    )
    eval_limit_mode: str = field(
        default=DEFAULT_LIMIT_MODE,
        metadata={"help": "`stratified` (the seeded sample) or `first` (the first N questions, for quick debugging)."},
    )
    eval_batch_size: int = field(default=8, metadata={"help": "Batch size of the eval hooks' generation."})
    eval_allow_partial: bool = field(
        default=False,
        metadata={"help": "Score a benchmark whose images are partly missing, labelled partial, instead of stopping."},
    )
    eval_backend: str = field(
        default="auto",
        metadata={"help": "What the eval hooks generate with: auto, transformers or vllm (docs/EVALUATION.md)."},
    )

    def __post_init__(self) -> None:
        if self.dataset_path and self.dataset_name:
            raise UserError(
                f"dataset_path ({self.dataset_path}) and dataset_name ({self.dataset_name}): give one of them "
                "(on the command line, --dataset_path '' drops a recipe's dataset_path)"
            )
        if self.accelerate_config and not Path(self.accelerate_config).is_file():
            raise UserError(f"accelerate_config: {self.accelerate_config} does not exist (see recipes/accelerate/)")
        if self.max_pixels <= 0:
            raise UserError(f"max_pixels: must be positive, got {self.max_pixels}")
        if self.max_pixels_per_image is not None and self.max_pixels_per_image <= 0:
            raise UserError(f"max_pixels_per_image: must be positive, got {self.max_pixels_per_image}")
        if self.max_train_samples is not None and self.max_train_samples <= 0:
            raise UserError(f"max_train_samples: must be positive, got {self.max_train_samples}")
        if self.eval_limit_mode not in LIMIT_MODES:
            raise UserError(f"eval_limit_mode: expected one of {', '.join(LIMIT_MODES)}, got {self.eval_limit_mode!r}")
        if self.eval_backend not in EVAL_BACKENDS:
            raise UserError(f"eval_backend: expected one of {', '.join(EVAL_BACKENDS)}, got {self.eval_backend!r}")
        require_at_least(self, "eval_batch_size", 1)
        require_at_least(self, "eval_limit", 1)
        from eval_hooks.plan import EvalPlan

        EvalPlan.of(self)  # the eval_* keys together: benchmark lists, NAME:N limits, eval_data (eval_hooks/plan.py)


@dataclass
class GRPOScriptArguments(ScriptArguments):
    """GRPO Visual-RFT on ORIC-format yes/no questions (ORIC, arXiv 2509.15695, Sec. 5)."""

    prompt_template: str = field(
        default="oric_r1",
        metadata={"help": "A key of finetune.oric_data.PROMPT_TEMPLATES, or a template containing `{question}`."},
    )
    max_prompt_length: int | None = field(
        default=1024,
        metadata={"help": "Drop prompts longer than this many tokens, image tokens included (TRL no longer does)."},
    )
    replay_path: str | None = field(
        default=None,
        metadata={
            "help": "Conventional yes/no questions in POPE's layout mixed into the GRPO data (docs/TRAINING.md)."
        },
    )
    replay_ratio: float = field(
        default=1.0, metadata={"help": "Replayed questions per ORIC question (with `replay_path`)."}
    )
    multi_image_path: str | None = field(
        default=None,
        metadata={"help": "Multi-image questions in MIOH's format mixed into the GRPO data (docs/TRAINING.md)."},
    )
    multi_image_root: str | None = field(
        default=None,
        metadata={"help": "Directory of the multi-image file's images (default: its manifest's, else its folder)."},
    )
    multi_image_ratio: float = field(
        default=1.0, metadata={"help": "Multi-image questions per ORIC question (with `multi_image_path`)."}
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy", "format"],
        metadata={"help": "Reward names from `rewards.REWARD_FUNCS` or dotted paths `pkg.module.func`."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # reward_funcs and reward_weights: finetune.recipe.check_reward_funcs
        if self.replay_ratio < 0:
            raise UserError(f"replay_ratio: expected a number >= 0, got {self.replay_ratio}")
        if self.multi_image_ratio < 0:
            raise UserError(f"multi_image_ratio: expected a number >= 0, got {self.multi_image_ratio}")


# Recipe switches that need a GPU extra (`pip install -e '.[gpu]'`): TRL's own options, checked up front so
# a recipe asking for them on a machine without the package fails in one line, not deep inside TRL.
# `use_vllm` is checked when the run starts instead (:func:`require_generation_runtime`): a vLLM recipe must
# still parse on a login node or CPU machine (`veritune slurm submit` validates it there).
OPTIONAL_PACKAGES = {"use_liger_kernel": ("liger_kernel", "Liger kernels")}


def require_generation_runtime(config: object) -> None:
    """With ``use_vllm: true``: one-line error, before any model loads, unless vLLM is installed and a CUDA
    GPU is visible (colocated engines and the NCCL link to a vLLM server both need one)."""
    from core.gpu import require_vllm, vllm_installed

    if not getattr(config, "use_vllm", False):
        return
    fallback = "set use_vllm: false to generate with transformers"
    if vllm_installed() and getattr(config, "use_cpu", False):
        raise UserError(f"use_vllm: vLLM rollouts need a GPU and use_cpu is true; {fallback}")
    require_vllm("use_vllm", fallback)


def require_optional_packages(config: object) -> None:
    """One-line error when a switch of :data:`OPTIONAL_PACKAGES` is on and its package is not installed."""
    import importlib.util

    for key, (module, what) in OPTIONAL_PACKAGES.items():
        if getattr(config, key, False) and importlib.util.find_spec(module) is None:
            raise UserError(
                f"{key}: {what} need the {module} package, not installed here (pip install -e '.[gpu]'); "
                f"set {key}: false"
            )


@dataclass
class VerituneGRPOConfig(TrainingArgumentsChecks, GRPOConfig):
    """TRL's ``GRPOConfig`` plus a global batch counted in prompts; its batch-size checks name the numbers to change.

    TRL counts ``per_device_train_batch_size`` in completions (G of them per prompt), while the ORIC trainer
    (Visual-RFT, open-r1-multimodal style) counts it in prompts. ``global_batch_prompts`` states the
    paper's batch once, as prompts per optimizer step over all processes, and derives
    ``gradient_accumulation_steps`` from it on whatever process count the run is launched with.
    """

    global_batch_prompts: int | None = field(
        default=None,
        metadata={"help": "Prompts per optimizer step over all processes; sets gradient_accumulation_steps."},
    )
    # Rollout batch: generate once for several optimizer steps (TRL's steps_per_generation), in the same unit as
    # global_batch_prompts so that the steps per round do not change with the GPU count.
    rollout_batch_prompts: int | None = field(
        default=None,
        metadata={
            "help": "Prompts generated per rollout round over all processes, a multiple of global_batch_prompts."
        },
    )

    # DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2; finetune/grpo_trainer.py). Off by
    # default: the ORIC paper's recipe (Table 9) trains on every group; a recipe that turns it on departs from it.
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "Replace groups without reward spread by newly drawn ones (DAPO, arXiv 2503.14476, Sec. 3.2)."
        },
    )
    dynamic_sampling_min_std: float = field(
        default=0.0,
        metadata={"help": "With dynamic_sampling: drop a group whose reward std is at most this."},
    )
    dynamic_sampling_max_rounds: int = field(
        default=3,
        metadata={"help": "With dynamic_sampling: at most this many extra sampling rounds per generation."},
    )
    no_spread_warning_steps: int = field(
        default=5,
        metadata={"help": "Warn once after this many consecutive steps without any reward spread (0: never)."},
    )

    # The compiled rollout decode (finetune/grpo_trainer.py, VerituneGRPOTrainer._compile_decode). Off by default:
    # no GPU benchmark shows it faster (docs/PERFORMANCE.md, "rollout").
    compiled_decode: bool = field(
        default=False,
        metadata={"help": "Decode rollouts with a static KV cache and a torch.compile'd step (not with vLLM)."},
    )
    decode_prompt_bucket: int = field(
        default=64,
        metadata={"help": "With compiled_decode: left-pad prompts to a multiple of this many tokens (0: TRL's)."},
    )

    def __post_init__(self) -> None:
        self.check_training_arguments()
        require_at_least(self, "num_generations", 2)
        require_at_least(self, "max_completion_length", 1)
        require_at_least(self, "temperature", 0)
        for key in ("dynamic_sampling_min_std", "dynamic_sampling_max_rounds", "no_spread_warning_steps"):
            require_at_least(self, key, 0)
        self._check_vllm()
        self._check_compiled_decode()
        require_optional_packages(self)
        explicit_steps_per_generation = self.steps_per_generation
        written_accumulation = self.gradient_accumulation_steps
        self._check_rollout_batch()
        if self.global_batch_prompts is not None:
            if self.generation_batch_size is not None:
                raise UserError(
                    "generation_batch_size: cannot be set together with global_batch_prompts (the generation batch "
                    "follows from it); set rollout_batch_prompts instead to reuse a generation over several steps"
                )
            # Must stay: TRL's __post_init__ checks the generation batch before self.world_size exists; redone below.
            provisional = self._global_batch_accumulation(int(os.environ.get("WORLD_SIZE", "1") or 1))
            if provisional is not None:
                self.gradient_accumulation_steps = provisional
        try:
            super().__post_init__()
        except ValueError as err:  # TRL raises a plain ValueError: only its text says it is the generation batch's
            if "divisible by num_generations" not in str(err):
                raise
            raise UserError(
                f"{err} The generation batch is per_device_train_batch_size ({self.per_device_train_batch_size}) "
                f"x processes ({self.world_size}) x steps_per_generation ({self.steps_per_generation}); change one "
                f"of them, or num_generations ({self.num_generations}), so that it is a multiple of num_generations"
            ) from None
        if self.global_batch_prompts is not None:
            processes = self._process_count()
            self.gradient_accumulation_steps = self._accumulation_for_global_batch(written_accumulation, processes)
            self.steps_per_generation = explicit_steps_per_generation or (
                self.gradient_accumulation_steps * self.steps_per_rollout
            )
            self.generation_batch_size = self.per_device_train_batch_size * processes * self.steps_per_generation
            if self.rollout_batch_prompts is not None:
                self._note_rollout_batch(processes)
            if self.generation_batch_size % self.num_generations:
                raise UserError(
                    f"steps_per_generation: {self.steps_per_generation} gives a generation batch of "
                    f"{self.generation_batch_size} completions, not a multiple of num_generations "
                    f"({self.num_generations})"
                )
        local = self.per_device_train_batch_size * self.steps_per_generation
        if self.dynamic_sampling and local % self.num_generations:
            raise UserError(
                f"dynamic_sampling: each process must hold whole groups, but its generation batch of "
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) x steps_per_generation "
                f"({self.steps_per_generation}) = {local} completions is not a multiple of num_generations "
                f"({self.num_generations})"
            )

    @property
    def steps_per_rollout(self) -> int:
        """Optimizer steps served by one rollout round (1 without ``rollout_batch_prompts``)."""
        if self.rollout_batch_prompts is None or not self.global_batch_prompts:
            return 1
        return self.rollout_batch_prompts // self.global_batch_prompts

    def _check_rollout_batch(self) -> None:
        """``rollout_batch_prompts``: a positive multiple of ``global_batch_prompts``, the one key that sets the
        generation batch, and checkpoints only between rounds."""
        rollout = self.rollout_batch_prompts
        if rollout is None:
            return
        if self.global_batch_prompts is None:
            raise UserError(
                f"rollout_batch_prompts: {rollout} needs global_batch_prompts (the optimizer batch in prompts that "
                "it is a multiple of)"
            )
        if rollout <= 0 or rollout % self.global_batch_prompts:
            raise UserError(
                f"rollout_batch_prompts: {rollout} is not a positive multiple of global_batch_prompts "
                f"({self.global_batch_prompts}), the prompts of one optimizer step"
            )
        if self.steps_per_generation is not None:  # generation_batch_size: refused with global_batch_prompts
            raise UserError(
                "rollout_batch_prompts: cannot be set together with steps_per_generation "
                f"({self.steps_per_generation}); the generation batch follows from rollout_batch_prompts"
            )
        rounds = self.steps_per_rollout
        saves_by_steps = getattr(self.save_strategy, "value", self.save_strategy) == "steps"
        if rounds > 1 and saves_by_steps and self.save_steps >= 1 and int(self.save_steps) % rounds:
            raise UserError(
                f"save_steps: {int(self.save_steps)} is not a multiple of the {rounds} optimizer steps of a rollout "
                f"round (rollout_batch_prompts {rollout} / global_batch_prompts {self.global_batch_prompts}); a run "
                "resumed from a checkpoint inside a round would not line up with TRL's rounds"
            )

    def _note_rollout_batch(self, processes: int) -> None:
        """Log what ``rollout_batch_prompts`` derived, as the accumulation change is logged."""
        logging.getLogger("veritune.grpo").warning(
            "steps_per_generation %d: rollout_batch_prompts %d = %d optimizer step(s) of %d prompts per rollout "
            "round; each of %d process(es) decodes %d completions per generate call",
            self.steps_per_generation,
            self.rollout_batch_prompts,
            self.steps_per_rollout,
            self.global_batch_prompts,
            processes,
            self.per_device_train_batch_size * self.steps_per_generation,
        )

    def rollout_summary(self, prompts: int) -> str:
        """One line on the rollout rounds of an epoch over ``prompts`` training prompts (TRL's RepeatSampler cuts
        each epoch's permutation into rounds and drops the incomplete last one); a UserError when not even one
        round fits."""
        per_round = self.generation_batch_size // self.num_generations
        rounds = prompts // per_round
        if not rounds:
            raise UserError(
                f"rollout_batch_prompts: {per_round} prompts per rollout round, but the training data holds only "
                f"{prompts}; lower it (a multiple of global_batch_prompts, {self.global_batch_prompts})"
            )
        steps = self.steps_per_rollout
        return (
            f"rollout: {per_round} prompts x {self.num_generations} per round, {steps} optimizer step(s) of "
            f"{self.global_batch_prompts} prompts each; {rounds} round(s) = {rounds * steps} steps per epoch of "
            f"{prompts} prompts ({prompts - rounds * per_round} left out, a new draw each epoch); the last step of "
            f"a round trains on completions {steps - 1} step(s) old"
        )

    def _check_vllm(self) -> None:
        """vLLM settings that TRL would only refuse after the model has loaded, or not at all."""
        if self.use_vllm and self.vllm_mode not in ("colocate", "server"):
            raise UserError(f"vllm_mode: expected colocate or server, got {self.vllm_mode!r}")
        if self.use_vllm and self.ds3_gather_for_generation is False:
            raise UserError(
                "ds3_gather_for_generation: false cannot be used with use_vllm (TRL pushes gathered weights to "
                "vLLM); set it to true, or use_vllm: false"
            )

    def _check_compiled_decode(self) -> None:
        """Refuse ``compiled_decode`` beside another generation engine; apply its prompt bucket."""
        require_at_least(self, "decode_prompt_bucket", 0)
        if not self.compiled_decode:
            return
        for engine in ("use_vllm", "use_transformers_continuous_batching"):
            if getattr(self, engine, False):
                raise UserError(f"compiled_decode: cannot be set together with {engine} (it replaces `generate`)")
        if self.decode_prompt_bucket:
            self.pad_to_multiple_of = self.decode_prompt_bucket

    def _process_count(self) -> int:
        """The processes of this launch. Accelerate reports one process at this point under a multi-process
        DeepSpeed launch on CPUs (its CPU path skips the process group it has not set up yet); the launcher's
        WORLD_SIZE is the count then. On GPUs the two agree."""
        launched = int(os.environ.get("WORLD_SIZE", "1") or 1)
        return self.world_size if self.world_size > 1 else launched

    def _global_batch_accumulation(self, processes: int) -> int | None:
        """The accumulation steps that make ``global_batch_prompts`` x ``num_generations`` completions per
        optimizer step on ``processes`` processes; None when that batch cannot be reached exactly."""
        completions = self.global_batch_prompts * self.num_generations
        per_step = self.per_device_train_batch_size * processes
        if self.global_batch_prompts <= 0 or completions % per_step:
            return None
        return completions // per_step

    def _reachable_process_counts(self, most: int = 64) -> list[int]:
        """The process counts up to ``most`` on which ``global_batch_prompts`` is reached exactly."""
        return [count for count in range(1, most + 1) if self._global_batch_accumulation(count) is not None]

    def _accumulation_for_global_batch(self, written: int, processes: int) -> int:
        """:meth:`_global_batch_accumulation` on the real process count, refused when unreachable; a change from
        the recipe's ``gradient_accumulation_steps`` (``written``) is logged."""
        steps = self._global_batch_accumulation(processes)
        completions = self.global_batch_prompts * self.num_generations
        per_step = self.per_device_train_batch_size * processes
        if steps is None:
            raise UserError(
                f"global_batch_prompts: {self.global_batch_prompts} prompts x num_generations ({self.num_generations}) "
                f"= {completions} completions per optimizer step is not reachable with per_device_train_batch_size "
                f"({self.per_device_train_batch_size}) x {processes} process(es) = {per_step} per micro-step; "
                f"run on N processes with {self.per_device_train_batch_size} x N dividing {completions} "
                f"(N = {', '.join(map(str, self._reachable_process_counts())) or 'none up to 64'}: veritune launch "
                "--num_processes N, veritune slurm submit --nodes x --gpus-per-node), or change "
                "per_device_train_batch_size"
            )
        if steps != written and int(os.environ.get("RANK", "0") or 0) == 0:  # said once, not once per process
            logging.getLogger("veritune.grpo").warning(
                "gradient_accumulation_steps %d -> %d: keeps the global batch at %d prompts (%d completions) on %d "
                "process(es)",
                written,
                steps,
                self.global_batch_prompts,
                completions,
                processes,
            )
        return steps


@dataclass
class DPOScriptArguments(ScriptArguments):
    """DPO on preference tuples (FINER-Tuning: FINER, arXiv 2603.17662, Sec. 3 and Table 10)."""

    data_format: str = field(
        default="auto",
        metadata={"help": "Preference data format: auto, veritune, finer (the FINER-Tuning release) or rlaif-v."},
    )
    eval_dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Validation preference data (default: the `validation` split of a veritune dataset directory)."
        },
    )
    validation_ratio: float = field(
        default=0.005,
        metadata={
            "help": "Share of a single-file dataset held out, seeded, for the eval loss (FINER Table 10: 0.005)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.validation_ratio < 1.0:
            raise UserError(f"validation_ratio: must be in [0, 1), got {self.validation_ratio}")


@dataclass
class VerituneDPOConfig(TrainingArgumentsChecks, DPOConfig):
    """TRL's ``DPOConfig`` plus a global batch; reference log-probs are computed online (precomputing them is
    unsupported for VLMs)."""

    global_batch_size: int | None = field(
        default=None,
        metadata={"help": "Preference tuples per optimizer step over all processes; sets gradient_accumulation_steps."},
    )

    def __post_init__(self) -> None:
        self.check_training_arguments()
        require_optional_packages(self)
        if self.precompute_ref_log_probs:
            raise UserError(
                "precompute_ref_log_probs: not supported for vision-language models; reference log-probs are "
                "computed online (with the adapter disabled for LoRA)"
            )
        if self.truncation_mode == "keep_end":
            raise UserError("truncation_mode: keep_end would cut the image tokens off the prompt; use keep_start")
        super().__post_init__()
        if self.global_batch_size is not None:
            self.gradient_accumulation_steps = self._accumulation_for_global_batch()

    def _reachable_process_counts(self, most: int = 64) -> list[int]:
        """The process counts up to ``most`` on which ``global_batch_prompts`` is reached exactly."""
        return [count for count in range(1, most + 1) if self._global_batch_accumulation(count) is not None]

    def _accumulation_for_global_batch(self) -> int:
        per_step = self.per_device_train_batch_size * self.world_size
        if self.global_batch_size <= 0 or self.global_batch_size % per_step:
            raise UserError(
                f"global_batch_size: {self.global_batch_size} is not a positive multiple of "
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) x processes ({self.world_size}); "
                "change per_device_train_batch_size or the number of processes"
            )
        steps = self.global_batch_size // per_step
        if steps != self.gradient_accumulation_steps:
            logging.getLogger("veritune.dpo").warning(
                "gradient_accumulation_steps %d -> %d: keeps the global batch at %d on %d process(es)",
                self.gradient_accumulation_steps,
                steps,
                self.global_batch_size,
                self.world_size,
            )
        return steps


@dataclass
class VerituneSFTConfig(TrainingArgumentsChecks, SFTConfig):
    """TRL's ``SFTConfig`` (the warm-start, finetune/sft.py), with the TrainingArguments checks every entry
    script's config makes."""

    def __post_init__(self) -> None:
        self.check_training_arguments()
        super().__post_init__()
