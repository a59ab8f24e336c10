"""The first hour of a new user: help, one flag vocabulary, one list syntax, errors as the last line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeChatServer

from core.errors import UserError
from core.llm_client import ChatClient
from veritune.cli import COMMANDS, build_parser, main

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_veritune(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "veritune.cli", *argv], cwd=REPO_ROOT, env=environment, capture_output=True, text=True
    )


# ---- help


def test_top_level_help_imports_no_command_module() -> None:
    code = (
        "import sys; from veritune.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'eval_hooks.cli', 'data_builders.oric.cli') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert "``" not in out  # no raw reST markup


def test_every_command_is_listed_with_the_help_line_its_parser_has() -> None:
    parser = build_parser()  # every module wired
    groups = {None: parser._subparsers._group_actions[0]}
    for name in ("build", "eval"):
        groups[name] = groups[None].choices[name]._subparsers._group_actions[0]
    for command in COMMANDS:
        helps = {action.dest: action.help for action in groups[command.group]._choices_actions}
        assert helps[command.name] == command.help, command.name


def all_parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if (
            hasattr(action, "choices")
            and isinstance(action.choices, dict)
            and action.__class__.__name__ == "_SubParsersAction"
        ):
            for name, child in action.choices.items():
                yield from all_parsers(child, (*path, name))


def test_every_help_shows_the_defaults_and_every_option_has_help() -> None:
    for path, parser in all_parsers(build_parser()):
        text = parser.format_help()  # a stray % in a help line would raise here
        for action in parser._actions:
            if action.option_strings and action.help != "==SUPPRESS==" and action.dest != "help":
                assert action.help, f"veritune {' '.join(path)} {action.option_strings[0]}: no help"
                default = action.default
                if default not in (None, False, [], "==SUPPRESS==") and action.nargs != 0:
                    assert f"default: {default}" in " ".join(text.split()), (path, action.option_strings)


def test_clip_model_default_is_in_help() -> None:
    result = run_veritune("build", "oric", "--help")
    assert "default: openai/clip-vit-base-patch32" in " ".join(result.stdout.split())


# ---- one vocabulary


def test_deprecated_judge_spellings_still_work(tmp_path: Path) -> None:
    args = build_parser(["eval", "score"]).parse_args(
        ["eval", "score", "--benchmarks", "pope", "--predictions", "p", "--judge-base-url", "u", "--judge-model", "m"]
    )
    assert (args.llm_base_url, args.llm_model, args.llm_cache) == ("u", "m", Path("outputs/cache/judge.sqlite"))
    args = build_parser(["build", "oric"]).parse_args(
        [
            "build",
            "oric",
            "--annotations",
            "a",
            "--image-root",
            "i",
            "--out",
            "o",
            "--judge",
            "openai",
            "--llm-timeout",
            "5",
        ]
    )
    assert (args.context_judge, args.llm_timeout) == ("openai", 5.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--benchmarks", "pope,,amber_discriminative"], "--benchmarks: empty entry in 'pope,,amber_discriminative'"),
        (["--benchmarks", "popee"], "--benchmarks: unknown benchmark 'popee' (did you mean 'pope'?"),
        (["--benchmarks", "pope", "--data", "data/pope"], "--data 'data/pope': expected BENCHMARK=PATH"),
        (["--benchmarks", "pope", "--data", "mioh=x"], "'mioh' is not among the benchmarks being evaluated"),
        (["--benchmarks", "pope,mioh", "--predictions", "{file}"], "one file holds one benchmark's predictions"),
        (["--benchmarks", "pope", "--llm-model", "judge"], "--llm-base-url and --llm-model: give both"),
        (
            ["--benchmarks", "pope", "--llm-base-url", "http://x", "--llm-model", "m", "--llm-timeout", "0"],
            "--llm-timeout: must be positive",
        ),
    ],
)
def test_eval_score_bad_input_is_one_line(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("")
    argv = [a.replace("{file}", str(predictions)) for a in argv]
    if "--predictions" not in argv:
        argv += ["--predictions", str(predictions)]
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "score", "--data-root", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.strip().splitlines() == [err.strip()] and err.startswith("error: ")
    assert message in err


# ---- errors are the last line


def test_error_is_printed_after_every_open_progress_bar_closes() -> None:
    code = (
        "from tqdm import tqdm\nfrom core.errors import UserError, exit_on_user_error\n"
        "@exit_on_user_error\ndef build():\n    bar = tqdm(total=10, desc='questions')\n    bar.update(3)\n"
        "    raise UserError('endpoint down')\nbuild()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "questions" in result.stderr  # the bar was drawn ...
    assert result.stderr.rstrip().splitlines()[-1] == "error: endpoint down"  # ... and the error is the last line


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            (500, "<html><body><h1>Internal Server Error</h1></body></html>"),
            "failed after 2 attempts: the server answered HTTP 500: 'Internal Server Error'",
        ),
        ((200, '{"choices": []}'), "the server answered HTTP 200 without an answer (IndexError): '{\"choices\": []}'"),
        ((200, "<html>gateway login</html>"), "HTTP 200 without an answer (JSONDecodeError): 'gateway login'"),
        (
            (401, '{"error": "invalid key"}'),
            'refused the request: HTTP 401 (check the API key in $VERITUNE_TEST_KEY): \'{"error": "invalid key"}\'',
        ),
    ],
)
def test_llm_errors_say_what_the_server_answered(tmp_path: Path, reply: tuple[int, str], expected: str) -> None:
    with FakeChatServer(lambda request: reply) as server:
        chat = ChatClient(
            server.base_url,
            "m",
            cache_path=tmp_path / "c.sqlite",
            api_key_env="VERITUNE_TEST_KEY",
            max_retries=1,
            backoff=0.01,
        )
        with pytest.raises(UserError) as error:
            chat.complete_many(["q1", "q2"])
    assert expected in str(error.value)


def test_llm_endpoint_down_through_the_cli_ends_with_the_error(tmp_path: Path) -> None:
    data = tmp_path / "hallusion.json"
    data.write_text(
        json.dumps(
            [
                {
                    "category": "VS",
                    "subcategory": "chart",
                    "set_id": "0",
                    "figure_id": "0",
                    "question_id": "0",
                    "question": "Is it?",
                    "gt_answer": "1",
                    "gt_answer_details": "It is.",
                    "filename": None,
                    "visual_input": "0",
                }
            ]
        )
    )
    predictions = tmp_path / "p.jsonl"
    predictions.write_text(json.dumps({"id": "VS_chart_0_0_0", "prediction": "maybe"}) + "\n")
    with FakeChatServer(lambda request: (503, "<html>Service Unavailable</html>")) as server:
        result = run_veritune(
            "eval",
            "score",
            "--benchmarks",
            "hallusionbench",
            "--data",
            f"hallusionbench={data}",
            "--predictions",
            str(predictions),
            "--llm-base-url",
            server.base_url,
            "--llm-model",
            "j",
            "--llm-cache",
            str(tmp_path / "j.sqlite"),
            "--llm-max-retries",
            "0",
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: LLM endpoint") and "HTTP 503: 'Service Unavailable'" in last


def test_main_returns_two_for_a_group_without_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build"]) == 2
    assert "synthetic-world" in capsys.readouterr().out


# ---- recipes: the TRL/open-r1 spellings


@pytest.mark.parametrize(
    "argv",
    [
        ["{recipe}", "--learning_rate", "3e-6"],
        ["--config", "{recipe}", "--learning_rate", "3e-6"],
        ["--learning_rate", "3e-6", "--config={recipe}"],
        ["--recipe", "{recipe}", "--learning_rate", "3e-6"],
    ],
    ids=["positional", "config", "config-equals-last", "recipe"],
)
def test_recipe_spellings_load_the_recipe_and_flags_override(argv: list[str]) -> None:
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    recipe = REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"
    script_args, training_args, model_args = parse_recipe(
        [a.replace("{recipe}", str(recipe)) for a in argv] + ["--use_cpu", "true"],
        (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig),
    )
    assert script_args.recipe == str(recipe)
    assert training_args.learning_rate == 3e-6  # the flag wins over the recipe
    assert training_args.num_generations == read_yaml_key(recipe, "num_generations")  # the recipe was loaded


def read_yaml_key(path: Path, key: str):
    import yaml

    return yaml.safe_load(path.read_text())[key]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["a.yaml", "--config", "b.yaml"], "2 recipes given"), (["--config"], "--config needs a recipe path")],
)
def test_recipe_spelling_mistakes(argv: list[str], message: str) -> None:
    from finetune.recipe import pop_recipe_path

    with pytest.raises(UserError, match=message):
        pop_recipe_path(list(argv))


# ---- quiet setup


def test_setup_runs_pip_once_per_change_of_pyproject(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    fake_python = tmp_path / ".venv" / "bin" / "python"
    fake_python.parent.mkdir(parents=True)
    fake_python.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/pip.log\n')
    fake_python.chmod(0o755)

    def setup() -> str:
        result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, check=True)
        return result.stdout + result.stderr

    assert "installing" in setup()
    calls = (tmp_path / "pip.log").read_text().splitlines()
    assert calls[-1] == "-m pip install --quiet --disable-pip-version-check -e .[test]"
    assert (
        setup() == "" and (tmp_path / "pip.log").read_text().splitlines() == calls
    )  # nothing changed: pip not run, silent
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n')
    assert "installing" in setup() and len((tmp_path / "pip.log").read_text().splitlines()) == 2 * len(calls)


def test_setup_hands_pips_settings_to_uv(tmp_path: Path) -> None:
    """setup.sh installs with uv (the test extra's pin), passing pip's index, find-links, constraint and
    certificate settings, which uv does not read itself, and pip's best-version-across-indexes rule."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    extras = '[project.optional-dependencies]\ntest = ["uv==9.9"]\n'
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n{extras}')
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "calls.log"
    # the venv's python: real Python for setup's own snippet and `pip config list`, a logger for every install
    fake_uv = f'#!/bin/sh\necho "uv $@ SSL_CERT_FILE=$SSL_CERT_FILE" >> {log}\n'
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-" ] || [ "$3" = "config" ]; then exec {sys.executable} "$@"; fi\n'
        f'echo "python $@" >> {log}\n'
        f"case \"$*\" in *uv==9.9*) printf '{fake_uv}' > {bin_dir}/uv; chmod +x {bin_dir}/uv ;; esac\n"
    )
    (bin_dir / "python").chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "SSL_CERT"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,  # no config files: only the variables below
        PIP_FIND_LINKS="/wheels",
        PIP_EXTRA_INDEX_URL="file:///index-a file:///index-b",
        PIP_CONSTRAINT="/caps.txt",
        PIP_CERT="/certs.pem",
    )
    result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert calls[1] == "python -m pip install --quiet --disable-pip-version-check uv==9.9"
    uv = calls[-1].split()
    assert uv[:6] == ["uv", "pip", "install", "--quiet", "--python", ".venv/bin/python"]
    assert uv[6:8] == ["--index-strategy", "unsafe-best-match"] and uv[-2:] == [".[test]", "SSL_CERT_FILE=/certs.pem"]
    assert sorted(uv[8:-3]) == sorted(
        ["--find-links=/wheels", "--extra-index-url=file:///index-a", "--extra-index-url=file:///index-b"]
        + ["--constraint=/caps.txt"]
    )
    assert not any("-e .[test]" in call for call in calls if call.startswith("python"))  # pip did not install


# ---- offline and not cached: one line at once


@pytest.mark.parametrize("offline", ["1", None])
def test_uncached_clip_model_offline_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: str | None
) -> None:
    import time

    from core import hub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    else:  # online, but the Hub does not answer
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start = time.perf_counter()
    with pytest.raises(UserError) as error:
        hub.require_model_source("openai/clip-vit-base-patch32", "--clip-model")
    assert time.perf_counter() - start < 5
    message = str(error.value)
    assert message.startswith(
        "--clip-model: 'openai/clip-vit-base-patch32' is not a local directory and not in the Hugging Face cache"
    )
    assert "--clip-model models/clip-vit-base-patch32" in message and "\n" not in message
    hub.require_model_source(str(tmp_path), "--clip-model")  # a local directory always passes


def test_training_side_uses_the_same_strict_list_parser() -> None:
    from eval_hooks.paths import parse_benchmark_names, parse_data_overrides

    # a recipe list, a comma-separated command-line value, and NAME:LIMIT, all through one parser
    assert parse_benchmark_names(["pope,mioh", "oric_bench_r1:5"], "eval_benchmarks", allow_limits=True) == [
        "pope",
        "mioh",
        "oric_bench_r1:5",
    ]
    with pytest.raises(UserError, match=r"eval_benchmarks: empty entry in 'pope,'"):
        parse_benchmark_names(["pope,"], "eval_benchmarks", allow_limits=True)
    with pytest.raises(
        UserError, match=r"eval_benchmarks: unknown benchmark 'oric_bench_r2' \(did you mean 'oric_bench_r1'"
    ):
        parse_benchmark_names(["oric_bench_r2"], "eval_benchmarks", allow_limits=True)
    with pytest.raises(UserError, match=r"eval_data 'data/pope': expected BENCHMARK=PATH"):
        parse_data_overrides(["data/pope"], "eval_data", ["pope"])
    assert parse_data_overrides(["oric_bench_r1=x.json"], "eval_data", ["oric_bench_r1:5"]) == {
        "oric_bench_r1": Path("x.json")
    }


def test_build_oric_with_the_default_clip_model_offline_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    from miniature.world import build_synthetic_world

    paths = build_synthetic_world(tmp_path / "world", num_train_images=4, num_val_images=1, seed=0, image_size=64)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "build",
                "oric",
                "--annotations",
                str(paths["train_annotations"]),
                "--image-root",
                str(paths["train_images"]),
                "--out",
                str(tmp_path / "oric.json"),
                "--clip-cache",
                str(tmp_path / "clip"),
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and time.perf_counter() - start < 30
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("error: --clip-model: 'openai/clip-vit-base-patch32' is not a local directory")
    )


def test_progress_bars_redraw_rarely_into_a_log_file(tmp_path: Path) -> None:
    import io

    from core.progress import LOG_INTERVAL_S, progress_bar, redraw_interval

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert redraw_interval(Terminal()) == 0.1 and redraw_interval(io.StringIO()) == LOG_INTERVAL_S
    log = io.StringIO()
    with progress_bar(total=1000, file=log, desc="items") as bar:
        for _ in range(1000):
            bar.update(1)
    assert log.getvalue().count("\r") <= 3  # opening, (at most one redraw), closing: not one per update


# ---- veritune launch


def test_launch_help_is_accelerates_whole_help_and_what_veritune_adds() -> None:
    ours = run_veritune("launch", "--help")
    assert ours.returncode == 0, ours.stderr
    theirs = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--help"],
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
    ).stdout
    assert ours.stdout.startswith("usage: veritune launch ") and "Accelerate launch command" not in ours.stdout
    sections = [line for line in theirs.splitlines() if line.endswith("Arguments:")]
    assert {"DeepSpeed Arguments:", "FSDP Arguments:", "Training Paradigm Arguments:"} <= set(sections)
    for line in sections:
        assert line in ours.stdout.splitlines(), line

    def options(text: str) -> set[str]:
        return {line.split()[0] for line in text.splitlines() if line.startswith("  --")}

    assert len(options(theirs)) > 100 and options(theirs) == options(ours.stdout)
    assert "what veritune launch adds" in ours.stdout and "accelerate_config" in ours.stdout


@pytest.mark.parametrize(
    ("script_args", "expected"),
    [
        (["recipes/qwen3vl_oric.yaml"], "recipes/accelerate/zero3.yaml"),
        (["--config", "recipes/qwen3vl_oric_lora.yaml", "--learning_rate", "1e-6"], "recipes/accelerate/zero2.yaml"),
        (["recipes/qwen3vl_oric.yaml", "--accelerate_config", "recipes/accelerate/single.yaml"], None),
        (["--learning_rate", "1e-6"], None),
    ],
)
def test_launch_uses_the_recipes_accelerate_config(script_args: list[str], expected: str | None) -> None:
    from veritune.launch import recipe_accelerate_config

    found = recipe_accelerate_config(script_args)
    if "--accelerate_config" in script_args:
        assert found == "recipes/accelerate/single.yaml"
    else:
        assert found == expected


@pytest.mark.parametrize(
    ("script_args", "message"),
    [
        (["recipes/qwen3vl_oric.yaml"], "error: bf16: true needs a CUDA GPU and none is visible here"),
        (
            ["recipes/miniature/tiny_oric_demo.yaml", "--num_processes", "2"],
            "error: command line: --num_processes is a flag of veritune launch (accelerate launch), not of the "
            "training script: put it before the script",
        ),
        (
            ["recipes/miniature/tiny_oric_demo.yaml", "--learning_rat", "1e-6"],
            "error: command line: unknown key 'learning_rat' (did you mean 'learning_rate'?)",
        ),
    ],
)
def test_launch_checks_the_recipe_before_any_worker_starts(
    tmp_path: Path, script_args: list[str], message: str
) -> None:
    """A recipe mistake, a launcher flag after the script or a GPU recipe on a machine without one: the launcher
    says it in one line and starts no worker (the recipe's accelerate config is still named: zero3's 4 processes
    would each have started up to say it)."""
    from helpers import run_launch

    result, workers = run_launch(
        tmp_path, "finetune/grpo.py", *script_args, "--output_dir", str(tmp_path / "out"), CUDA_VISIBLE_DEVICES=""
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "(the recipe's accelerate_config)" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), result.stderr[-3000:]
    assert workers == []


def test_a_copied_recipe_whose_accelerate_config_stayed_behind_names_config_file(tmp_path: Path) -> None:
    recipe = tmp_path / "my_run.yaml"
    recipe.write_text("model_name_or_path: m\naccelerate_config: accelerate/single.yaml\n")
    result = run_veritune("launch", "finetune/grpo.py", str(recipe))
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: {recipe}: accelerate_config: accelerate/single.yaml does not exist (looked in: ")
    )
    assert result.stderr.strip().endswith("veritune launch --config_file PATH ...)")


def test_a_global_batch_no_process_count_reaches_names_the_counts_that_do(tmp_path: Path) -> None:
    """`slurm submit --gpus-per-node 3` on a 16-prompt batch: the counts that reach it, and the flags of both
    launchers (not `--num_processes` alone, a flag slurm submit does not have)."""
    result = run_veritune(
        "slurm",
        "submit",
        "--entry",
        "grpo",
        "--recipe",
        "recipes/qwen3vl_oric.yaml",
        "--gpus-per-node",
        "3",
        "--dry-run",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: global_batch_prompts: 16 prompts") and "x 3 process(es)" in line, line
    assert (
        "(N = 1, 2, 4, 8, 16: veritune launch --num_processes N, veritune slurm submit --nodes x --gpus-per-node)"
        in line
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["build", "oric", "--annotations", "{a}", "--image-root", "{d}", "--out", "{d}/o.json"],
            "error: --llm-base-url/--llm-model: the cooccurrence context judge asks no LLM; use --context-judge "
            "openai, or drop the --llm-* options",
        ),
        (
            ["build", "finer", "--scene-graphs", "{a}", "--image-root", "{d}", "--out", "{d}/f"],
            "error: --llm-base-url/--llm-model: with --scene-graphs the LLM only regenerates the negatives that "
            "--filter-model drops; add --filter-model, or drop the --llm-* options",
        ),
    ],
)
def test_builders_refuse_llm_flags_they_would_not_use(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    annotations = tmp_path / "a.json"
    annotations.write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    argv = [a.replace("{a}", str(annotations)).replace("{d}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == message


def test_ctrl_c_under_launch_says_interrupted_once(tmp_path: Path) -> None:
    """Ctrl-C reaches the launcher and its worker (one process group): the launcher says "interrupted" once and
    exits 130; the worker, a veritune process started by it, exits without saying it again."""
    import signal

    worker = tmp_path / "worker.py"
    worker.write_text(
        "import time\n"
        "from core.errors import exit_on_user_error\n"
        "def main():\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(120)\n"
        "exit_on_user_error(main)()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "veritune.cli", "launch", "--num_processes", "1", str(worker)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # and Ctrl-C's default action, as in a terminal: a suite started in the background of a shell without job
        # control inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout.readline().strip() == "ready"
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("interrupted:")]
    assert lines == ["interrupted: finished work is kept; rerun the same command to resume"], stderr


def test_ctrl_c_leaves_no_colour_codes_in_a_log_file(tmp_path: Path) -> None:
    """A run interrupted while W&B logs, its output going to a file: the log holds plain text, W&B's closing lines
    included (its exit hook would write them with colour codes)."""
    import signal

    worker = tmp_path / "worker.py"
    worker.write_text(
        "import time\n"
        "import wandb\n"
        "from core.errors import exit_on_user_error\n"
        "def main():\n"
        f"    wandb.init(mode='offline', dir={str(tmp_path)!r}, project='p')\n"
        "    wandb.log({'loss': 1.0})\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(120)\n"
        "exit_on_user_error(main)()\n"
    )
    log = tmp_path / "run.log"
    with log.open("w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "veritune.cli", "launch", "--num_processes", "1", str(worker)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_SILENT": "false"},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            deadline = time.monotonic() + 300
            while "ready" not in log.read_text() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    assert process.returncode == 130, text
    assert "interrupted:" in text, text
    assert "\x1b[" not in text, text


# ---- what the libraries underneath print: nothing that tells the user nothing


def test_offline_wandb_banner_is_not_printed_by_slurm_dry_run_or_an_entry_script(tmp_path: Path) -> None:
    """transformers prints "[INFO] Running in WANDB offline mode" when its W&B integration is imported, which
    parsing a recipe does: neither the CLI nor an entry script shows it."""
    env = {"WANDB_MODE": "offline"}
    dry_run = run_veritune(
        "slurm", "submit", "--entry", "grpo", "--recipe", "recipes/miniature/tiny_oric_demo.yaml", "--dry-run", env=env
    )
    assert dry_run.returncode == 0, dry_run.stderr[-2000:]
    assert "sbatch" in dry_run.stdout and "WANDB offline" not in dry_run.stdout + dry_run.stderr
    entry = subprocess.run(  # stops at its first check (the recipe's tiny model is not built here): one line
        [
            sys.executable,
            "finetune/grpo.py",
            "recipes/miniature/tiny_oric_demo.yaml",
            "--output_dir",
            str(tmp_path / "o"),
        ]
        + ["--model_name_or_path", str(tmp_path / "no-model")],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True,
        text=True,
    )
    assert entry.returncode == 2 and entry.stderr.startswith("error: "), entry.stderr[-2000:]
    assert "WANDB offline" not in entry.stdout + entry.stderr


def test_tiny_clip_on_a_cpu_prints_no_deepspeed_accelerator_notice(tmp_path: Path) -> None:
    """DeepSpeed, loaded by transformers, warns "Setting accelerator to CPU ... unable to detect it" unless told
    up front that the machine has no GPU; `veritune tiny-clip` tells it."""
    env = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
    result = subprocess.run(
        [sys.executable, "-m", "veritune.cli", "tiny-clip", "--out", str(tmp_path / "clip")],
        cwd=REPO_ROOT,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tiny CLIP written to" in result.stdout
    console = result.stdout + result.stderr  # DeepSpeed's logger writes to stdout
    assert "Setting accelerator" not in console and "unable to detect" not in console, console


def test_model_files_are_written_without_a_bar(tmp_path: Path) -> None:
    """transformers' "Writing model shards" (and "Loading weights") bars are not drawn by veritune's commands."""
    result = run_veritune("tiny-model", "--out", str(tmp_path / "model"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "model" / "config.json").is_file()
    console = result.stdout + result.stderr
    assert "Writing model shards" not in console and "Loading weights" not in console, console


def test_launch_prints_no_deepspeed_accelerator_notice(tmp_path: Path) -> None:
    """The launcher tells DeepSpeed, before accelerate loads it, that the machine has no GPU (and its workers
    inherit it): no "unable to detect" notice from the launcher or a worker."""
    from helpers import run_launch

    worker = tmp_path / "worker.py"
    worker.write_text("import deepspeed\nprint('worker ran', flush=True)\n")
    result, _ = run_launch(tmp_path, "--num_processes", "1", worker, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 0, result.stderr[-2000:]
    console = result.stdout + result.stderr
    assert "worker ran" in console and "unable to detect" not in console, console


# ---- eval run --model: what is wrong with the model, at once


def _pope_file(root: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (8, 8)).save(root / "a.png")
    questions = root / "coco_pope_random.json"
    questions.write_text(json.dumps({"question_id": 1, "image": "a.png", "text": "Is there a cat?", "label": "yes"}))
    return questions


def test_eval_run_model_typo_and_a_run_still_training_are_said_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = _pope_file(tmp_path)
    run = tmp_path / "outputs" / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (run / "checkpoint-4").mkdir()  # being written: no trainer_state.json yet
    expected = {
        tmp_path / "outputs" / "typo": f"error: --model: {tmp_path / 'outputs' / 'typo'}: no such directory",
        run: f"error: --model: {run} holds no final model yet (a run still training?); its latest saved checkpoint "
        f"is {run / 'checkpoint-2'}: pass --model {run / 'checkpoint-2'}",
    }
    for model, message in expected.items():
        with pytest.raises(SystemExit) as exit_info:
            main(
                ["eval", "run", "--model", str(model), "--benchmarks", "pope", "--data", f"pope={questions}"]
                + ["--out", str(tmp_path / "eval")]
            )
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == message
    assert not (tmp_path / "eval").exists()


def test_the_accumulation_line_is_said_by_rank_zero_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every process parses the recipe; the line saying gradient_accumulation_steps was derived comes once."""
    import logging

    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    argv = [
        "recipes/miniature/tiny_oric_demo.yaml",
        "--global_batch_prompts",
        "2",
        "--gradient_accumulation_steps",
        "7",
    ]
    for rank, said in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="veritune"):
            parse_recipe(argv, (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
        assert any("gradient_accumulation_steps 7 ->" in record.getMessage() for record in caplog.records) is said
