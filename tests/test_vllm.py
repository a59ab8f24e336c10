"""The vLLM paths without a GPU: the vLLM recipes parse into the intended TRL settings, a vLLM run where
vLLM or a GPU is missing stops in one line before any model loads, and `eval run --backend vllm` and the
eval hook drive vLLM as they should (against tests/fake_vllm.py, which records every call)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import fields
from pathlib import Path

import pytest
from eval_fixtures import write_oric_bench
from fake_vllm import install, write_package
from helpers import REPO_ROOT, run_entry

from core.errors import UserError
from eval_hooks.callback import EvalHookCallback
from eval_hooks.runner import PREDICTIONS_FILE, read_predictions_file
from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
from finetune.models import get_lora_config
from finetune.recipe import parse_recipe
from veritune.cli import main

GRPO_TYPES = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
RECIPES = REPO_ROOT / "recipes"
ON_CPU = ["--use_cpu", "true"]  # the recipes' bf16 parses on this CPU machine


def parse(recipe: str, *overrides: str) -> tuple[GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig]:
    return parse_recipe([str(RECIPES / recipe), *ON_CPU, *overrides], GRPO_TYPES)


@pytest.fixture()
def four_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse the recipes as on the 4 GPUs they are written for (the generation batch depends on it)."""
    monkeypatch.setattr(VerituneGRPOConfig, "world_size", property(lambda self: 4))


def differing_keys(a: object, b: object) -> set[str]:
    return {f.name for f in fields(a) if f.init and getattr(a, f.name) != getattr(b, f.name)}


# ---------------------------------------------------------------------------------------------- recipes

RUN_NAMES = {"output_dir", "run_name", "logging_dir", "recipe", "wandb_tags"}  # naming the run, not training it


def test_colocated_recipe_is_table_9_plus_documented_vllm_settings(four_processes: None) -> None:
    base = parse("qwen3vl_oric.yaml")
    script_args, args, model_args = parse("qwen3vl_oric_vllm.yaml")
    assert args.use_vllm is True and args.vllm_mode == "colocate"
    assert args.vllm_gpu_memory_utilization == 0.35
    assert args.vllm_enable_sleep_mode is True
    assert args.vllm_tensor_parallel_size == 1 and 4 % args.vllm_tensor_parallel_size == 0
    assert args.ds3_gather_for_generation is True
    assert args.vllm_max_model_length == script_args.max_prompt_length + args.max_completion_length == 1280
    assert args.vllm_importance_sampling_correction is True
    assert script_args.accelerate_config == "recipes/accelerate/zero3.yaml"
    # Everything else is the Table 9 recipe's: batch, optimisation, GRPO loss, sampling, eval hooks.
    assert differing_keys(base[1], args) - RUN_NAMES == {
        "use_vllm",
        "vllm_gpu_memory_utilization",
        "vllm_max_model_length",
        "vllm_enable_sleep_mode",
    }
    assert differing_keys(base[0], script_args) - RUN_NAMES == set()
    assert differing_keys(base[2], model_args) == set()
    assert args.gradient_accumulation_steps == 4 and args.generation_batch_size == 144 * 8  # 9 steps per round
    assert script_args.eval_backend == "auto"  # the hook reuses the colocated engines


def test_server_recipe_points_trainers_at_a_vllm_server(four_processes: None) -> None:
    base = parse("qwen3vl_oric.yaml")
    script_args, args, _ = parse("qwen3vl_oric_vllm_server.yaml")
    assert args.use_vllm is True and args.vllm_mode == "server"
    assert args.vllm_server_port == 8000 and args.vllm_server_timeout == 900
    assert args.vllm_server_base_url is None  # host and port come from the Slurm script
    assert args.ds3_gather_for_generation is True
    assert script_args.accelerate_config == "recipes/accelerate/zero3_multinode.yaml"
    assert differing_keys(base[1], args) - RUN_NAMES == {
        "use_vllm",
        "vllm_mode",
        "vllm_server_timeout",
        "vllm_max_model_length",
    }
    _, host_given, _ = parse("qwen3vl_oric_vllm_server.yaml", "--vllm_server_host", "node7")
    assert host_given.vllm_server_host == "node7"


def test_lora_vllm_recipe_keeps_adapters_off_the_vision_tower(four_processes: None, tiny_qwen3vl: Path) -> None:
    from transformers import AutoModelForImageTextToText

    base = parse("qwen3vl_oric_lora.yaml")
    script_args, args, model_args = parse("qwen3vl_oric_lora_vllm.yaml")
    assert args.use_vllm is True and args.vllm_mode == "colocate" and args.vllm_enable_sleep_mode is False
    assert model_args.use_peft and model_args.lora_language_model_only
    assert differing_keys(base[2], model_args) == set()
    assert script_args.accelerate_config == "recipes/accelerate/zero2.yaml"
    pattern = get_lora_config(model_args).target_modules
    assert isinstance(pattern, str)  # a regex, matched in full: a bare suffix list would reach the vision tower
    # Qwen3-VL's own module names (the tiny model has the real architecture): every module the adapters
    # wrap is a language-model attention projection, and none is in the vision tower or its merger.
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl)
    names = [name for name, _ in model.named_modules()]
    wrapped = [name for name in names if re.fullmatch(pattern, name)]
    assert wrapped and all(".language_model." in name for name in wrapped)
    assert not any(re.fullmatch(pattern, name) for name in names if ".visual." in name)
    assert {name.rsplit(".", 1)[1] for name in wrapped} == {"q_proj", "k_proj", "v_proj", "o_proj"}
    for name in ("model.visual.blocks.0.attn.qkv", "model.visual.merger.linear_fc1", "model.visual.blocks.0.attn.proj"):
        assert not re.fullmatch(pattern, name)


def test_vllm_settings_trl_would_refuse_late_are_one_line_at_parse() -> None:
    with pytest.raises(UserError, match="^vllm_mode: expected colocate or server, got 'remote'$"):
        parse("miniature/tiny_oric_demo.yaml", "--use_vllm", "true", "--vllm_mode", "remote")
    with pytest.raises(UserError, match="^ds3_gather_for_generation: false cannot be used with use_vllm"):
        parse("miniature/tiny_oric_demo.yaml", "--use_vllm", "true", "--ds3_gather_for_generation", "false")
    with pytest.raises(UserError, match="^eval_backend: vllm reuses the trainer's colocated vLLM engine"):
        parse("miniature/tiny_oric_demo.yaml", "--eval_backend", "vllm")
    with pytest.raises(UserError, match="^eval_backend: vllm reuses .* vllm_mode: server"):
        parse("miniature/tiny_oric_demo.yaml", "--use_vllm", "true", "--vllm_mode", "server", "--eval_backend", "vllm")
    with pytest.raises(UserError, match="^eval_backend: expected one of auto, transformers, vllm, got 'sglang'$"):
        parse("miniature/tiny_oric_demo.yaml", "--eval_backend", "sglang")


# ---------------------------------------------------------------------------------------------- one-line errors


def test_vllm_run_without_vllm_stops_before_the_model_loads() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    # A model path that does not exist: had the model been loaded first, the error would name it.
    result = run_entry(
        "grpo.py", "recipes/miniature/tiny_oric_demo.yaml", "--use_vllm", "true", "--model_name_or_path", "/nope"
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: use_vllm: vLLM is not installed here (pip install -e '.[vllm]', on a GPU machine); "
        "set use_vllm: false to generate with transformers"
    )
    assert "Traceback" not in result.stderr


def test_vllm_run_without_a_gpu_stops_before_the_model_loads(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    site = write_package(tmp_path / "site")  # vLLM "installed" (importable, with its metadata), no GPU
    path = f"{site}:{REPO_ROOT}:{REPO_ROOT / 'tests'}"
    common = ["recipes/miniature/tiny_oric_demo.yaml", "--use_vllm", "true", "--model_name_or_path", "/nope"]
    result = run_entry("grpo.py", *common, "--use_cpu", "false", PYTHONPATH=path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: use_vllm: vLLM needs a CUDA GPU and none is visible here (torch.cuda.is_available() is False); "
        "set use_vllm: false to generate with transformers"
    )
    result = run_entry("grpo.py", *common, PYTHONPATH=path)  # the tiny recipe's use_cpu: true
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: use_vllm: vLLM rollouts need a GPU and use_cpu is true; "
        "set use_vllm: false to generate with transformers"
    )


def test_eval_backend_vllm_without_vllm_or_gpu_is_one_line(
    tiny_qwen3vl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    write_oric_bench(tmp_path / "bench", questions=2)
    argv = ["eval", "run", "--model", str(tiny_qwen3vl), "--benchmarks", "oric_bench", "--backend", "vllm"]
    argv += ["--data-root", str(tmp_path / "bench"), "--out", str(tmp_path / "out")]
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.strip() == (
            "error: --backend vllm: vLLM is not installed here (pip install -e '.[vllm]', on a GPU machine); "
            "use --backend transformers"
        )
    install(monkeypatch)
    monkeypatch.setattr("core.gpu.cuda_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --backend vllm: vLLM needs a CUDA GPU and none is visible here (torch.cuda.is_available() is "
        "False); use --backend transformers"
    )
    assert not (tmp_path / "out" / "oric_bench" / PREDICTIONS_FILE).exists()


# ---------------------------------------------------------------------------------------------- evaluation


def test_eval_run_backend_vllm_sends_chat_prompts_and_images_and_scores_the_answers(
    tiny_qwen3vl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    fake = install(monkeypatch, answer=lambda prompt: "Yes" if "cup" in prompt else "No")
    bench, _ = write_oric_bench(tmp_path / "bench", questions=6)
    out = tmp_path / "out"
    argv = ["eval", "run", "--model", str(tiny_qwen3vl), "--benchmarks", "oric_bench", "--backend", "vllm"]
    assert main([*argv, "--data-root", str(tmp_path / "bench"), "--out", str(out), "--batch-size", "16"]) == 0

    (engine,) = fake.named("LLM")
    assert engine["model"] == str(tiny_qwen3vl) and engine["limit_mm_per_prompt"] == {"image": 8}
    assert engine["seed"] == 0 and engine["tensor_parallel_size"] == 1
    calls = fake.named("generate")
    requests = [request for call in calls for request in call["requests"]]
    assert len(requests) == 24 and len(calls) == 2  # 6 questions x 4 paraphrases, batches of 16
    assert all(call["params"].temperature == 0.0 for call in calls)  # greedy
    assert {call["params"].max_tokens for call in calls} == {1024}  # ORIC-Bench's budget (ORIC Sec. 4.1)
    for request in requests:
        assert request["prompt"].startswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>")
        assert request["prompt"].endswith("<|im_start|>assistant\n")
        (image,) = request["multi_modal_data"]["image"]
        assert isinstance(image, Image.Image)

    header, predictions = read_predictions_file(out / "oric_bench" / PREDICTIONS_FILE)
    assert header["generation"]["backend"] == "vllm" and len(predictions) == 24
    # The canned answers say yes exactly to the cup questions: scored as ORIC's evaluate.py does.
    records = json.loads(bench.read_text())
    truth = [r["solution"] for r in records]
    said = ["yes" if r["target_object"] == "cup" else "no" for r in records]
    f1 = []
    for label in ("yes", "no"):
        hits = sum(t == p == label for t, p in zip(truth, said))
        precision, recall = hits / said.count(label), hits / truth.count(label)
        f1.append(2 * precision * recall / (precision + recall) if hits else 0.0)
    metrics = json.loads((out / "oric_bench" / "metrics.json").read_text())
    assert metrics["counts"]["resolved"] == 24
    assert metrics["metrics"]["yes_proportion"] == pytest.approx(100.0 * said.count("yes") / len(said))
    assert metrics["metrics"]["macro/f1"] == pytest.approx(100.0 * sum(f1) / 2, abs=0.01)


class FakeGeneration:
    """TRL's ``VLLMGeneration`` as the eval hook uses it: its engine, mode, sleep mode and weight push."""

    def __init__(self, llm: object, calls: list, *, mode: str = "colocate", sleep: bool = True) -> None:
        self.llm, self.calls, self.mode, self.enable_sleep_mode = llm, calls, mode, sleep
        self.tensor_parallel_size = 1
        self._llm_weights_sleeping = sleep

    def sync_weights(self) -> None:
        self.calls.append(("sync_weights", None))


@pytest.fixture()
def live_model(tiny_qwen3vl: Path) -> tuple[object, object]:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl, dtype="float32").train()
    return model, AutoProcessor.from_pretrained(tiny_qwen3vl)


def test_hook_reuses_the_trainers_colocated_engine(
    live_model: tuple[object, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install(monkeypatch, answer=lambda prompt: "no")
    write_oric_bench(tmp_path / "bench", questions=2)
    generation = FakeGeneration(fake.module.LLM(), fake.calls)
    fake.calls.clear()
    model, processor = live_model
    hook = EvalHookCallback(["oric_bench"], str(tmp_path / "bench"), batch_size=8, max_new_tokens=4)
    hook.bind_vllm(generation)
    results = hook.evaluate_model(model, processor, tmp_path / "run" / "eval" / "checkpoint-3", step=3)

    # The training model's weights go into the engine first, the sleeping KV cache wakes, the benchmark is
    # answered by the engine, and the engine goes back to sleep as after a rollout (weights dropped).
    order = [call for call, _ in fake.calls]
    assert order == ["sync_weights", "wake_up", "generate", "sleep"], order
    assert fake.named("wake_up") == [["kv_cache"]] and fake.named("sleep") == [2]
    assert generation._llm_weights_sleeping is True
    assert not fake.named("LLM")  # no second engine
    assert results["oric_bench"]["counts"]["predicted"] == 8
    assert results["oric_bench"]["metrics"]["yes_proportion"] == 0.0  # the engine's "no" to every question
    header, _ = read_predictions_file(tmp_path / "run" / "eval" / "checkpoint-3" / "oric_bench" / PREDICTIONS_FILE)
    assert header["generation"]["backend"] == "vllm"
    assert model.training  # train mode restored


def test_hook_generates_with_transformers_when_told_or_when_the_engine_is_a_server(
    live_model: tuple[object, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = install(monkeypatch)
    write_oric_bench(tmp_path / "bench", questions=1)
    model, processor = live_model
    for backend, mode, reason in (
        ("transformers", "colocate", "transformers (the live training model)"),
        ("auto", "server", "the vLLM engine is a server on another node"),
        ("auto", None, "transformers (the live training model)"),
    ):
        hook = EvalHookCallback(["oric_bench"], str(tmp_path / "bench"), max_new_tokens=2, backend=backend)
        hook.bind_vllm(None if mode is None else FakeGeneration(fake.module.LLM(), fake.calls, mode=mode))
        with caplog.at_level(logging.INFO, logger="veritune.eval"):
            results = hook.evaluate_model(model, processor, tmp_path / backend / str(mode) / "checkpoint-1", step=1)
        assert results["oric_bench"]["counts"]["predicted"] == 4
        assert reason in caplog.text
        caplog.clear()
    assert not fake.named("generate") and not fake.named("sync_weights")


def test_entry_scripts_hand_the_hook_the_recipes_backend_and_the_trainers_engine(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from finetune.training import bind_callbacks, get_callbacks

    write_oric_bench(tmp_path / "bench", questions=1)
    script_args, training_args, _ = parse(
        "miniature/tiny_oric_demo.yaml",
        "--eval_on_save",
        "true",
        "--eval_benchmarks",
        "oric_bench",
        "--eval_data_root",
        str(tmp_path / "bench"),
        "--eval_backend",
        "transformers",
        "--report_to",
        "none",
        "--output_dir",
        str(tmp_path / "run"),
    )
    (hook,) = [cb for cb in get_callbacks(script_args, training_args) if isinstance(cb, EvalHookCallback)]
    assert hook.backend == "transformers"
    engine = object()
    for use_vllm, expected in ((True, engine), (False, None)):
        trainer = SimpleNamespace(
            use_vllm=use_vllm, vllm_generation=engine, callback_handler=SimpleNamespace(callbacks=[hook])
        )
        bind_callbacks(trainer)
        assert hook._vllm is expected
