"""Every recipe loads into its entry script's dataclasses; the ORIC recipe equals ORIC Table 9."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from core.errors import UserError
from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
from finetune.recipe import load_recipe, parse_recipe

REPO_ROOT = Path(__file__).resolve().parent.parent
GRPO_TYPES = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
# the paper recipes in recipes/, the miniature's in recipes/miniature/
RECIPES = sorted([*(REPO_ROOT / "recipes").glob("*.yaml"), *(REPO_ROOT / "recipes" / "miniature").glob("*.yaml")])
# an `_sft_` recipe is an SFT stage (tests/test_miniature.py), whatever data it names
GRPO_RECIPES = [p for p in RECIPES if ("oric" in p.name or "mioh" in p.name) and "_sft_" not in p.name]
# Recipes are parsed on this CPU machine: `use_cpu` lets TrainingArguments accept their bf16 settings.
ON_CPU = ["--use_cpu", "true"]


def parse_grpo(recipe: Path, *overrides: str) -> tuple[GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig]:
    return parse_recipe([str(recipe), *ON_CPU, *overrides], GRPO_TYPES)


@pytest.fixture(autouse=True)
def four_processes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse the real recipes as on the 4 GPUs they are written for (the generation batch depends on it)."""
    if "tiny" not in request.node.name:
        monkeypatch.setattr(VerituneGRPOConfig, "world_size", property(lambda self: 4))


@pytest.mark.parametrize("recipe", GRPO_RECIPES, ids=lambda p: p.name)
def test_grpo_recipe_loads(recipe: Path) -> None:
    script_args, training_args, model_args = parse_grpo(recipe)
    assert model_args.model_name_or_path
    # the paper's reward; the miniature answers plainly (tests/test_miniature.py checks its recipe)
    expected = ["plain_accuracy"] if recipe.name == "tiny_oric_miniature.yaml" else ["accuracy", "format"]
    if "mioh" in recipe.name:  # a multi-image row is scored by the option reward (recipes/base/mioh_grpo.yaml)
        expected = ["accuracy", "option_accuracy", "format"]
    if recipe.name == "tiny_mioh_miniature.yaml":  # the miniature's plain answers (miniature/multi_image_half.py)
        expected = ["plain_accuracy", "plain_option_accuracy"]
    assert script_args.reward_funcs == expected
    accelerate_config = REPO_ROOT / script_args.accelerate_config
    assert accelerate_config.parent.name == "accelerate"


def test_every_recipe_is_covered_by_a_loader_test() -> None:
    recipes = {p.name for p in RECIPES}
    assert all(any(kind in name for kind in ("oric", "mioh", "finer", "sft")) for name in recipes), (
        recipes
    )  # sft: tests/test_miniature.py


def test_qwen3vl_oric_recipe_equals_table_9() -> None:
    script_args, args, model_args = parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml")
    assert model_args.model_name_or_path == "Qwen/Qwen3-VL-8B-Instruct"
    assert not model_args.use_peft  # full-parameter
    assert args.beta == 0.0
    assert args.epsilon == 0.2
    assert args.optim == "adamw_torch"
    assert args.learning_rate == 2e-6
    assert args.lr_scheduler_type == "cosine"
    assert args.weight_decay == 0.0
    assert args.bf16 is True
    assert args.max_grad_norm == 1.0
    assert args.global_batch_prompts == 16  # Table 9's batch in prompts: 1 x 4 accumulation x 4 GPUs
    assert args.per_device_train_batch_size == 8  # TRL counts completions: Table 9's 1 prompt x G = 8
    assert args.gradient_accumulation_steps == 4
    assert args.temperature == 0.7
    assert args.top_p == 0.8
    assert args.top_k == 20
    assert args.num_generations == 8
    assert script_args.max_prompt_length == 1024
    assert args.max_completion_length == 256
    assert args.num_train_epochs == 15
    assert script_args.accelerate_config == "recipes/accelerate/zero3.yaml"
    # Eq. 6: per-sequence 1/|o_i| normalisation, rewards z-scored within each group of G.
    assert args.loss_type == "grpo"
    assert args.scale_rewards == "group"
    assert args.reward_weights == [1.0, 1.0]
    assert "wandb" in args.report_to


def test_lora_recipe_targets_language_model_attention_only() -> None:
    _, _, model_args = parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric_lora.yaml")
    assert model_args.use_peft and model_args.lora_language_model_only
    assert set(model_args.lora_target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"}


def test_command_line_overrides_recipe() -> None:
    script_args, args, _ = parse_grpo(
        REPO_ROOT / "recipes/qwen3vl_oric.yaml", "--learning_rate", "1e-6", "--max_prompt_length", "512"
    )
    assert args.learning_rate == 1e-6
    assert script_args.max_prompt_length == 512


def test_unknown_recipe_key_names_the_closest(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("learning_rat: 1.0e-5\n")
    with pytest.raises(UserError, match=r"bad\.yaml: unknown key 'learning_rat' \(did you mean 'learning_rate'\?\)"):
        load_recipe(recipe, GRPO_TYPES)


def test_unknown_flag_names_the_closest_tiny() -> None:
    with pytest.raises(UserError, match=r"unknown key 'num_generation' \(did you mean 'num_generations'\?\)"):
        parse_grpo(REPO_ROOT / "recipes/miniature/tiny_oric_demo.yaml", "--num_generation", "4")


def test_missing_recipe_file() -> None:
    with pytest.raises(UserError, match="recipe file not found: nope.yaml"):
        parse_recipe(["nope.yaml"], GRPO_TYPES)


def test_recipe_that_is_not_a_mapping(tmp_path: Path) -> None:
    recipe = tmp_path / "list.yaml"
    recipe.write_text("- a\n- b\n")
    with pytest.raises(UserError, match="list.yaml: expected a mapping"):
        parse_recipe([str(recipe)], GRPO_TYPES)


def test_generation_batch_not_divisible_names_the_numbers_tiny() -> None:
    with pytest.raises(
        UserError, match=r"per_device_train_batch_size \(4\) x processes \(1\) x steps_per_generation \(2\)"
    ):
        parse_grpo(REPO_ROOT / "recipes/miniature/tiny_oric_demo.yaml", "--num_generations", "3")


def test_recipe_naming_a_missing_accelerate_config(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("accelerate_config: recipes/accelerate/nope.yaml\n")
    with pytest.raises(UserError, match="accelerate_config: recipes/accelerate/nope.yaml does not exist"):
        parse_recipe([str(recipe)], GRPO_TYPES)


@pytest.mark.parametrize("recipe", [p for p in RECIPES if "finer" in p.name], ids=lambda p: p.name)
def test_dpo_recipe_loads(recipe: Path) -> None:
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig

    script_args, training_args, model_args = parse_recipe(
        [str(recipe), *ON_CPU], (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)
    )
    # FINER-Tuning's loss (Eq. 5); the image-contrast recipe adds an SFT term on the chosen answer (RPO)
    loss = ["sigmoid", "sft"] if recipe.name == "tiny_finer_contrast.yaml" else ["sigmoid"]
    assert model_args.model_name_or_path and training_args.beta == 0.1 and training_args.loss_type == loss
    assert (REPO_ROOT / script_args.accelerate_config).is_file()


@pytest.mark.parametrize("config", sorted((REPO_ROOT / "recipes" / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_config_loads(config: Path) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(config))
    assert loaded.num_processes >= 1 and loaded.num_machines >= 1
    if "zero" in config.name:
        assert loaded.deepspeed_config["zero_stage"] == int(config.name[4])


# use_vllm is checked when the run starts, so that vLLM recipes parse on a login node: tests/test_vllm.py
@pytest.mark.parametrize(("flag", "package"), [("--use_liger_kernel", "liger_kernel")])
def test_gpu_extras_missing_is_one_line(flag: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(UserError, match=rf"{flag[2:]}: .* need the {package} package, not installed here"):
        parse_recipe(
            ["recipes/miniature/tiny_oric_demo.yaml", flag, "true"],
            (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig),
        )


def completions_per_optimizer_step(args: VerituneGRPOConfig) -> int:
    return args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps


def oric_sampler(args: VerituneGRPOConfig, prompts: int = 600) -> list[int]:
    """TRL's training sampler, built as GRPOTrainer builds it, over ``prompts`` prompts (ORIC: 600)."""
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(
        list(range(prompts)),
        mini_repeat_count=args.num_generations,
        batch_size=args.generation_batch_size // args.num_generations,
        repeat_count=args.steps_per_generation,
        seed=args.seed,
    )
    return list(sampler)


@pytest.mark.parametrize("recipe", ["qwen3vl_oric.yaml", "qwen3vl_oric_lora.yaml"])
def test_grpo_recipe_steps_take_table_9_prompts_and_completions_on_4_gpus(recipe: str) -> None:
    """ORIC Table 9 (paper's trainer counts prompts): 1 prompt x 4 accumulation x 4 GPUs = 16 prompts,
    each sampled G = 8 times = 128 completions per optimizer step; one rollout round of 144 prompts serves 9
    such steps."""
    _, args, _ = parse_grpo(REPO_ROOT / "recipes" / recipe)
    assert args.world_size == 4
    assert completions_per_optimizer_step(args) == 128
    assert args.gradient_accumulation_steps == 4
    assert args.rollout_batch_prompts == 144 and args.steps_per_rollout == 9
    assert args.steps_per_generation == 4 * 9
    assert args.generation_batch_size == 144 * 8
    assert args.per_device_train_batch_size * args.steps_per_generation == 288  # per GPU per generate call
    indices = oric_sampler(args)
    first_round = indices[: args.generation_batch_size]
    assert len(set(first_round)) == 144
    # TRL draws the same seeded permutation whatever the round size: the round's first 16 prompts are the ones
    # the paper's one-generation-per-step run trains its first step on.
    _, paper, _ = parse_grpo(REPO_ROOT / "recipes" / recipe, "--rollout_batch_prompts", "16")
    assert paper.steps_per_generation == paper.gradient_accumulation_steps == 4
    assert first_round[:128] == oric_sampler(paper)[:128]
    # 600 prompts in rounds of 144: 4 full rounds (the sampler drops the 24 left over), 36 steps per epoch and
    # 540 in 15 epochs; the paper's 16-prompt steps give 37 and 555. Each round is yielded
    # steps_per_generation times (one fetch per micro-step, all processes).
    steps_per_epoch = len(indices) // args.generation_batch_size // args.gradient_accumulation_steps
    assert steps_per_epoch * args.num_train_epochs == 540
    assert len(oric_sampler(paper)) // paper.generation_batch_size // 4 * paper.num_train_epochs == 555
    assert args.rollout_summary(600) == (
        "rollout: 144 prompts x 8 per round, 9 optimizer step(s) of 16 prompts each; 4 round(s) = 36 steps per "
        "epoch of 600 prompts (24 left out, a new draw each epoch); the last step of a round trains on "
        "completions 8 step(s) old"
    )


@pytest.mark.parametrize(("processes", "accumulation"), [(1, 16), (2, 8), (4, 4), (8, 2), (16, 1)])
def test_global_batch_prompts_recomputes_accumulation_per_process_count(
    monkeypatch: pytest.MonkeyPatch, processes: int, accumulation: int
) -> None:
    monkeypatch.setattr(VerituneGRPOConfig, "world_size", property(lambda self: processes))
    _, args, _ = parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml")
    assert args.gradient_accumulation_steps == accumulation
    assert completions_per_optimizer_step(args) == 16 * 8
    # The rollout round stays 144 prompts = 9 optimizer steps on any process count; its completions split evenly.
    assert args.steps_per_generation == accumulation * 9
    assert args.generation_batch_size == 144 * 8
    assert args.per_device_train_batch_size * args.steps_per_generation == 144 * 8 // processes
    _, paper, _ = parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml", "--rollout_batch_prompts", "16")
    assert paper.steps_per_generation == accumulation and paper.generation_batch_size == 16 * 8


@pytest.mark.parametrize("processes", [1, 2, 4, 8])
def test_rollout_batch_prompts_logs_what_it_derived(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, processes: int
) -> None:
    monkeypatch.setattr(VerituneGRPOConfig, "world_size", property(lambda self: processes))
    with caplog.at_level("WARNING", logger="veritune.grpo"):
        _, args, _ = parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml")
    derived = [r.getMessage() for r in caplog.records if r.getMessage().startswith("steps_per_generation")]
    assert derived == [
        f"steps_per_generation {args.steps_per_generation}: rollout_batch_prompts 144 = 9 optimizer step(s) of 16 "
        f"prompts per rollout round; each of {processes} process(es) decodes {1152 // processes} completions per "
        "generate call"
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["--rollout_batch_prompts", "100"],
            r"rollout_batch_prompts: 100 is not a positive multiple of global_batch_prompts \(16\)",
        ),
        (["--rollout_batch_prompts", "0"], r"rollout_batch_prompts: 0 is not a positive multiple"),
        (
            ["--steps_per_generation", "8"],
            r"rollout_batch_prompts: cannot be set together with steps_per_generation \(8\)",
        ),
        (
            ["--save_strategy", "steps", "--save_steps", "10"],
            r"save_steps: 10 is not a multiple of the 9 optimizer steps of a rollout round \(rollout_batch_prompts 144",
        ),
    ],
)
def test_bad_rollout_batch_is_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml", *overrides)


def test_rollout_batch_needs_global_batch_prompts_tiny() -> None:
    """The tiny recipe states no global_batch_prompts: a rollout round in prompts has nothing to be a multiple of."""
    with pytest.raises(UserError, match=r"rollout_batch_prompts: 4 needs global_batch_prompts"):
        parse_grpo(REPO_ROOT / "recipes/miniature/tiny_oric_demo.yaml", "--rollout_batch_prompts", "4")


def test_rollout_round_larger_than_the_data_is_refused() -> None:
    _, args, _ = parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml")
    with pytest.raises(UserError, match=r"rollout_batch_prompts: 144 prompts per rollout round, .* holds only 100"):
        args.rollout_summary(100)


def test_rollout_round_with_save_steps_between_rounds_and_dynamic_sampling() -> None:
    """Checkpoints every 18 steps fall between rounds of 9; dynamic sampling works per generation batch, which is
    the whole round (each process's 288 completions are 36 whole groups of 8)."""
    _, args, _ = parse_grpo(
        REPO_ROOT / "recipes/qwen3vl_oric.yaml",
        "--save_strategy",
        "steps",
        "--save_steps",
        "18",
        "--dynamic_sampling",
        "true",
    )
    assert args.steps_per_rollout == 9 and args.dynamic_sampling
    assert args.per_device_train_batch_size * args.steps_per_generation % args.num_generations == 0


def test_tiny_recipes_keep_one_generation_per_step() -> None:
    """The CPU demo's and walkthrough's numbers stay as they were: no tiny recipe sets a rollout round."""
    import yaml

    for recipe in sorted((REPO_ROOT / "recipes" / "miniature").glob("*.yaml")):
        assert "rollout_batch_prompts" not in yaml.safe_load(recipe.read_text()), recipe.name


def test_finer_recipes_have_no_rollout() -> None:
    """FINER-Tuning is DPO: no generation, so no rollout round (the key is GRPO's alone)."""
    from finetune.configs import VerituneDPOConfig

    assert "rollout_batch_prompts" not in VerituneDPOConfig.__dataclass_fields__


@pytest.mark.parametrize("processes", [3, 32])
def test_launch_that_cannot_reach_the_global_batch_is_refused(monkeypatch: pytest.MonkeyPatch, processes: int) -> None:
    """3 GPUs cannot split 128 completions into whole micro-batches of 8; 32 GPUs would need 256."""
    monkeypatch.setattr(VerituneGRPOConfig, "world_size", property(lambda self: processes))
    with pytest.raises(
        UserError, match=rf"global_batch_prompts: 16 prompts .* = 128 completions .* x {processes} process"
    ):
        parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml")


def test_global_batch_prompts_with_generation_batch_size_is_refused() -> None:
    with pytest.raises(UserError, match="generation_batch_size: cannot be set together with global_batch_prompts"):
        parse_grpo(REPO_ROOT / "recipes/qwen3vl_oric.yaml", "--generation_batch_size", "128")


def test_table_9_launch_lines_give_4_processes() -> None:
    """The README and the entry point's docstring launch the ORIC recipe on the 4 processes it expects, and
    zero3.yaml itself says 4."""
    import yaml

    assert yaml.safe_load((REPO_ROOT / "recipes/accelerate/zero3.yaml").read_text())["num_processes"] == 4
    for source in ("README.md", "finetune/grpo.py", "recipes/qwen3vl_oric.yaml", "recipes/qwen3vl_oric_lora.yaml"):
        lines = [
            line
            for line in (REPO_ROOT / source).read_text().splitlines()
            if ("accelerate launch" in line or "veritune launch" in line) and "grpo.py" in line
        ]
        assert lines, source
        assert all("--num_processes 4" in line for line in lines), (source, lines)


def test_real_grpo_recipes_log_completion_tables() -> None:
    for recipe in ("qwen3vl_oric.yaml", "qwen3vl_oric_lora.yaml"):
        _, args, _ = parse_grpo(REPO_ROOT / "recipes" / recipe)
        assert args.log_completions and args.num_completions_to_print == 8


PAPER_BENCHMARKS = {
    "oric": {"oric_bench", "amber_discriminative", "hallusionbench"},  # ORIC Sec. 5, Fig. 5
    "mioh": {"oric_bench", "mioh", "amber_discriminative", "hallusionbench"},  # ORIC's and the MIOH bench
    "finer": {"finer", "pope", "amber_discriminative", "hallusionbench"},  # FINER Tables 1-2
}


@pytest.mark.parametrize(
    "recipe",
    sorted((REPO_ROOT / "recipes").glob("*.yaml")),  # the paper recipes (the miniature's are in recipes/miniature/)
    ids=lambda p: p.name,
)
def test_real_recipe_evaluates_its_papers_benchmarks_with_limits(recipe: Path) -> None:
    from eval_hooks.paths import parse_benchmark_limits
    from eval_hooks.registry import get_benchmark

    kind = next(kind for kind in ("oric", "mioh", "finer") if kind in recipe.name)
    raw = load_recipe(recipe, _dpo_types() if kind == "finer" else GRPO_TYPES)
    assert raw["eval_on_save"] is True
    assert raw["eval_data_root"] == "data/benchmarks"
    names, limits = parse_benchmark_limits(raw["eval_benchmarks"])
    assert set(names) == PAPER_BENCHMARKS[kind]
    assert set(limits) == set(names) and all(n > 0 for n in limits.values())
    for name in names:
        get_benchmark(name)  # every name is registered


def _dpo_types() -> tuple[type, ...]:
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig

    return (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)


@pytest.mark.parametrize("variant", ["", "_lora"])
def test_mioh_recipes_are_the_oric_recipes_with_the_multi_image_mix(variant: str) -> None:
    """recipes/qwen3vl_mioh*.yaml: ORIC's recipe of the same variant, plus one MIOH-format question per ORIC
    question, 200,704 pixels per image of a multi-image prompt, 2,048 prompt tokens and the option reward."""
    mioh = parse_grpo(REPO_ROOT / f"recipes/qwen3vl_mioh{variant}.yaml")
    oric = parse_grpo(REPO_ROOT / f"recipes/qwen3vl_oric{variant}.yaml")
    script_args = mioh[0]
    assert script_args.multi_image_path == "data/mioh_rft/mioh.json" and script_args.multi_image_ratio == 1.0
    assert script_args.max_pixels_per_image == 200704 and script_args.max_prompt_length == 2048
    assert script_args.max_pixels == oric[0].max_pixels == 1003520  # a one-image ORIC prompt keeps its budget
    assert mioh[1].reward_weights == [1.0, 1.0, 1.0]
    differ = {"output_dir", "run_name", "logging_dir", "max_prompt_length", "reward_weights"}
    for ours, theirs in zip(mioh[1:], oric[1:], strict=True):
        for name in (f.name for f in fields(theirs) if f.name not in differ):
            assert getattr(ours, name) == getattr(theirs, name), name
