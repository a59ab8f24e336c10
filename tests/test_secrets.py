"""A secret is never written anywhere: a recipe file holding one is refused (naming the file, the key and the
environment variable to use), a secret override is not passed to sbatch, and a command-line token is redacted
in the recorded arguments. The run that uses a command-line token and leaves it in no file is in
tests/test_training_outputs.py (``test_a_hub_token_on_the_command_line_reaches_the_hub_and_no_file_or_log``)."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run_entry, run_launch

from core.errors import UserError
from core.secrets import is_secret_key, redact_argv, withhold_secrets, withhold_token_flags
from veritune.cli import main

TOKEN = "hf_verituneTestSecretNotARealOne42"


def test_only_credentials_count_as_secrets() -> None:
    """Tokenizer and length settings are not secrets; of every key the entry scripts know, only hub_token is."""
    from trl import SFTConfig

    from finetune import configs
    from finetune.sft import SFTScriptArguments

    for key in ("max_tokens", "max_new_tokens", "pad_token", "eos_token", "image_token_id", "tokenizer_name"):
        assert not is_secret_key(key), key
    assert not is_secret_key("api_key_env")  # the name of a variable, not its value
    for key in ("hub_token", "hf_token", "token", "wandb_api_key", "db_password", "client_secret", "secret_key"):
        assert is_secret_key(key), key
    classes = (
        configs.GRPOScriptArguments,
        configs.VerituneGRPOConfig,
        configs.DPOScriptArguments,
        configs.VerituneDPOConfig,
        configs.VerituneModelConfig,
        SFTScriptArguments,
        SFTConfig,
    )
    assert {f.name for cls in classes for f in fields(cls) if is_secret_key(f.name)} == {"hub_token"}


def test_a_recipe_file_with_a_hub_token_is_one_error_line_naming_hf_token(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    base = (REPO_ROOT / "recipes" / "miniature" / "tiny_finer_demo.yaml").resolve()
    recipe.write_text(f"include: {base}\nhub_token: {TOKEN}\n")
    result = run_entry("dpo.py", recipe, "--output_dir", tmp_path / "run", timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {recipe}: hub_token: a secret is not written in a recipe file (the model card, veritune_run.json "
        "and W&B copy the recipe); remove it and set the environment variable HF_TOKEN instead"
    ]
    assert "Traceback" not in result.stderr and TOKEN not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()


def test_an_included_base_with_a_nested_token_is_refused_naming_the_base(tmp_path: Path) -> None:
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    (tmp_path / "base.yaml").write_text(json.dumps({"model_init_kwargs": {"token": TOKEN}}))
    (tmp_path / "recipe.yaml").write_text("include: base.yaml\nlearning_rate: 1.0e-6\n")
    with pytest.raises(UserError) as info:
        parse_recipe([str(tmp_path / "recipe.yaml")], (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
    assert str(info.value).startswith(f"{tmp_path / 'base.yaml'}: model_init_kwargs.token: a secret is not written")
    assert str(info.value).endswith("set the environment variable HF_TOKEN instead") and TOKEN not in str(info.value)


def test_slurm_submit_refuses_a_secret_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """sbatch's arguments are shown to every user of the cluster: the token goes in the environment instead."""
    monkeypatch.chdir(tmp_path)
    recipe = REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"
    argv = ["slurm", "submit", "--entry", "grpo", "--recipe", str(recipe), "--dry-run"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--override", f"--hub_token {TOKEN}"])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "error: --override: hub_token: a secret is not passed to sbatch (a job's arguments are shown to every user "
        "of the cluster); export HF_TOKEN instead (the jobs inherit the environment)"
    ]
    assert "$ sbatch" not in out and TOKEN not in out + err


def test_command_line_secrets_are_redacted_and_taken_into_hf_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from finetune.configs import VerituneGRPOConfig

    argv = ["r.yaml", "--hub_token", TOKEN, f"--hub-token={TOKEN}", "--model_init_kwargs", json.dumps({"token": TOKEN})]
    assert TOKEN not in " ".join(redact_argv(argv))
    assert redact_argv(argv)[:4] == ["r.yaml", "--hub_token", "<HUB_TOKEN>", "--hub-token=<HUB_TOKEN>"]
    assert redact_argv(["--max_new_tokens", "8", "--pad_token", "<pad>"]) == [
        "--max_new_tokens",
        "8",
        "--pad_token",
        "<pad>",
    ]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    args = VerituneGRPOConfig(output_dir="unused", hub_token=TOKEN, model_init_kwargs={"token": TOKEN}, use_cpu=True)
    withhold_secrets(args)
    assert args.hub_token is None and "token" not in args.model_init_kwargs and os.environ["HF_TOKEN"] == TOKEN


def test_token_flags_are_taken_off_the_arguments_into_hf_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    kwargs = json.dumps({"token": TOKEN, "revision": "main"})
    argv = ["r.yaml", "--hub_token", TOKEN, f"--hub-token={TOKEN}", "--model_init_kwargs", kwargs, "--max_steps", "2"]
    assert withhold_token_flags(argv) == ["r.yaml", "--model_init_kwargs", '{"revision": "main"}', "--max_steps", "2"]
    assert os.environ["HF_TOKEN"] == TOKEN
    assert withhold_token_flags(["--max_new_tokens", "8", "--pad_token", "<pad>"]) == [
        "--max_new_tokens",
        "8",
        "--pad_token",
        "<pad>",
    ]
    with pytest.raises(UserError, match="^hub_token and model_init_kwargs.token: two different Hugging Face tokens"):
        withhold_token_flags(["--hub_token", TOKEN, "--model_init_kwargs", json.dumps({"token": TOKEN + "x"})])


def test_launch_gives_the_workers_the_token_in_hf_token_not_on_their_command_line(tmp_path: Path) -> None:
    """Every user of a node reads the workers' command lines (``ps``) for the whole run: the launcher keeps the
    token off them."""
    seen = tmp_path / "argv.jsonl"
    result, workers = run_launch(
        tmp_path,
        "--config_file", "recipes/accelerate/single.yaml",
        "finetune/sft.py", "recipes/miniature/tiny_sft_mioh_format.yaml",
        "--model_name_or_path", str(tmp_path / "no-model"), "--output_dir", str(tmp_path / "out"),
        "--hub_token", TOKEN,
        CUDA_VISIBLE_DEVICES="", VERITUNE_TEST_WORKER_ARGV=str(seen),
    )  # fmt: skip
    assert workers == ["finetune/sft.py"], result.stderr[-3000:]
    [worker] = [json.loads(line) for line in seen.read_text().splitlines()]
    assert TOKEN not in " ".join(worker["argv"]) and worker["hf_token"] == TOKEN
    assert TOKEN not in result.stdout + result.stderr
