"""Bad input never reaches a traceback: for each command, a table of mistakes, each with the
exit code and a substring of the one ``error:`` line it must end with."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, entry_env

from core.errors import UserError, exit_on_user_error, os_error_message
from veritune.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    return int(code or 0), capsys.readouterr().err


def assert_one_error_line(err: str, substring: str) -> None:
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    assert substring in errors[0], errors[0]
    assert err.rstrip().splitlines()[-1] == errors[0], "the error is not the last line"


@pytest.fixture()
def paths(tmp_path: Path) -> dict[str, Path]:
    """Files a user might get wrong: a regular file where a directory goes, non-UTF-8 text, duplicates."""
    from test_finer_builder import GRAPH

    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file\n")
    folder = tmp_path / "existing-dir"
    folder.mkdir()
    images = tmp_path / "images"
    images.mkdir()
    graphs = tmp_path / "graphs.json"
    graphs.write_text(json.dumps([{**GRAPH, "image": "0.jpg"}]))
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"image": "0.jpg", "caption": "ok"}\n{"image": "1.jpg", "caption": "caf\xe9"}\n')
    annotations = tmp_path / "instances.json"
    annotations.write_bytes(b'{"images": [], "categories": [{"id": 1, "name": "caf\xe9"}], "annotations": []}')
    bench = tmp_path / "bench.json"
    bench.write_text(
        json.dumps(
            [{"id": 1, "image": "a.jpg", "target_object": "cup", "problem": ["Is there a cup?"] * 4, "solution": "yes"}]
        )
    )
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_bytes(b'{"id": "1/p0", "prediction": "yes"}\n{"id": "1/p1", "prediction": "s\xed"}\n')
    duplicates = tmp_path / "duplicates.jsonl"
    duplicates.write_text(
        '{"id": "1/p0", "prediction": "yes"}\n{"id": "1/p1", "prediction": "no"}\n{"id": "1/p0", "prediction": "no"}\n'
    )
    return {
        "tmp": tmp_path,
        "blocker": blocker,
        "dir": folder,
        "images": images,
        "graphs": graphs,
        "latin1": latin1,
        "annotations": annotations,
        "bench": bench,
        "predictions": predictions,
        "duplicates": duplicates,
    }


# (id, command line with {placeholders} from `paths`, exit code, substring of the error line)
CLI_CASES = [
    (
        "finer-out-under-a-file",
        "build finer --scene-graphs {graphs} --image-root {images} --out {blocker}/data",
        2,
        "blocker: a part of this path is a regular file",
    ),
    (
        "finer-out-is-a-file",
        "build finer --scene-graphs {graphs} --image-root {images} --out {blocker}",
        2,
        "is a file, but this build writes a directory",
    ),
    (
        "finer-captions-not-utf8",
        "build finer --captions {latin1} --image-root {images} --out {tmp}/o --llm-base-url http://127.0.0.1:9/v1 "
        "--llm-model m --llm-cache {tmp}/c.sqlite",
        2,
        "latin1.jsonl, line 2: not UTF-8 text",
    ),
    (
        "finer-bench-out-is-a-dir",
        "build finer-bench --scene-graphs {graphs} --out {dir}",
        2,
        "existing-dir: is a directory",
    ),
    (
        "finer-bench-out-under-a-file",
        "build finer-bench --scene-graphs {graphs} --out {blocker}/bench.csv",
        2,
        "blocker: a part of this path is a regular file",
    ),
    (
        "oric-out-is-a-dir",
        "build oric --annotations {annotations} --image-root {images} --out {dir}",
        2,
        "existing-dir: is a directory",
    ),
    (
        "oric-out-under-a-file",
        "build oric --annotations {annotations} --image-root {images} --out {blocker}/o.json",
        2,
        "blocker: a part of this path is a regular file",
    ),
    (
        "oric-annotations-not-utf8",
        "build oric --annotations {annotations} --image-root {images} --out {tmp}/o.json",
        2,
        "instances.json: not UTF-8 text",
    ),
    (
        "warmstart-out-not-jsonl",
        "build warmstart-data --annotations {annotations} --image-root {images} --out {tmp}/t.json",
        2,
        "t.json: expected a .jsonl file (the JSON lines finetune/sft.py reads)",
    ),
    (
        "warmstart-negative-questions",
        "build warmstart-data --annotations {annotations} --image-root {images} --out {tmp}/t.jsonl "
        "--questions-per-image -1",
        2,
        "--questions-per-image: must be at least 0, got -1",
    ),
    (
        "warmstart-unknown-answer-style",
        "build warmstart-data --annotations {annotations} --image-root {images} --out {tmp}/t.jsonl "
        "--answer-styles plain yes",
        2,
        "--answer-styles: invalid choice: 'yes'",
    ),
    (
        "warmstart-negative-slot",
        "build warmstart-data --annotations {annotations} --image-root {images} --out {tmp}/t.jsonl "
        "--attribute-pairs-per-image 1 --attribute-pair-slots -1",
        2,
        "--attribute-pair-slots: expected slot positions 0, 1, ..., got [-1]",
    ),
    (
        "warmstart-slots-without-pairs",
        "build warmstart-data --annotations {annotations} --image-root {images} --out {tmp}/t.jsonl "
        "--attribute-pair-slots 0",
        2,
        "--scene-graphs and --attribute-pair-slots: only with --attribute-pairs-per-image",
    ),
    (
        "warmstart-image-root-a-file",
        "build warmstart-data --annotations {annotations} --image-root {blocker} --out {tmp}/t.jsonl",
        2,
        "blocker: not a directory",
    ),
    (
        "warmstart-annotations-not-utf8",
        "build warmstart-data --annotations {annotations} --image-root {images} --out {tmp}/t.jsonl",
        2,
        "instances.json: not UTF-8 text",
    ),
    (
        "score-predictions-not-utf8",
        "eval score --benchmarks oric_bench --data oric_bench={bench} --predictions {predictions}",
        2,
        "predictions.jsonl, line 2: not UTF-8 text",
    ),
    (
        "score-duplicate-ids",
        "eval score --benchmarks oric_bench --data oric_bench={bench} --predictions {duplicates}",
        2,
        "id '1/p0' appears again with a different prediction (first on line 1)",
    ),
    (
        "score-predictions-is-a-dir",
        "eval score --benchmarks oric_bench --data oric_bench={bench} --predictions {dir}",
        2,
        "predictions file not found",
    ),
    (
        "run-blind-fill-out-of-range",
        "eval run --model unused --benchmarks oric_bench --data oric_bench={bench} --out {tmp}/o --blind "
        "--blind-fill 300,0,0",
        2,
        "--blind-fill '300,0,0': expected R,G,B, three whole numbers from 0 to 255",
    ),
    (
        "run-blind-fill-not-three-numbers",
        "eval run --model unused --benchmarks oric_bench --data oric_bench={bench} --out {tmp}/o --blind "
        "--blind-fill grey",
        2,
        "--blind-fill 'grey': expected R,G,B",
    ),
    (
        "run-blind-fill-without-blind",
        "eval run --model unused --benchmarks oric_bench --data oric_bench={bench} --out {tmp}/o --blind-fill 0,0,0",
        2,
        "--blind-fill: sets the colour of --blind's blank images; add --blind",
    ),
    (
        "slurm-nodes-0",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml --nodes 0 --dry-run",
        2,
        "--nodes: must be at least 1",
    ),
    (
        "slurm-negative-gpus",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml --gpus-per-node -2 --dry-run",
        2,
        "--gpus-per-node: must be 0",
    ),
    (
        "slurm-missing-accelerate-config",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml "
        "--accelerate-config nope.yaml --dry-run",
        2,
        "--accelerate-config: nope.yaml not found",
    ),
    (
        "slurm-unknown-benchmark",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml --eval-benchmarks popee "
        "--eval-data-root d --dry-run",
        2,
        "--eval-benchmarks: unknown benchmark 'popee' (did you mean 'pope'?",
    ),
    (
        "slurm-override-typo",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml --override learning_rat=1 --dry-run",
        2,
        "unknown key 'learning_rat'",
    ),
    (
        "slurm-override-flag-typo",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml "
        "--override '--learning_rat 1' --dry-run",
        2,
        "--override: unknown key 'learning_rat' (did you mean 'learning_rate'?)",
    ),
    (
        "slurm-override-bad-value",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml "
        "--override '--learning_rate -1' --dry-run",
        2,
        "learning_rate: must be at least 0, got -1.0",
    ),
    (
        "slurm-dpo-recipe-as-grpo",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_finer_demo.yaml --dry-run",
        2,
        "tiny_finer_demo.yaml is a dpo recipe",
    ),
    (
        "slurm-build-unbalanced-quote",
        "slurm submit --entry grpo --recipe recipes/miniature/tiny_oric_demo.yaml --build 'oric --out \"x' --dry-run",
        2,
        "--build 'oric --out \"x': No closing quotation",
    ),
]


@pytest.mark.parametrize(
    ("command", "code", "message"), [case[1:] for case in CLI_CASES], ids=[case[0] for case in CLI_CASES]
)
def test_cli_bad_input(command: str, code: int, message: str, paths: dict[str, Path], capsys, monkeypatch) -> None:
    import shlex

    monkeypatch.chdir(REPO_ROOT)
    actual, err = run_cli(shlex.split(command.format(**{key: str(value) for key, value in paths.items()})), capsys)
    assert actual == code, err[-3000:]
    assert_one_error_line(err, message)


def test_slurm_submit_valid_dry_run_still_prints_jobs(capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    assert (
        main(
            [
                "slurm",
                "submit",
                "--entry",
                "grpo",
                "--recipe",
                "recipes/miniature/tiny_oric_demo.yaml",
                "--override",
                "--learning_rate 1e-6",
                "--dry-run",
                "--run-dir",
                "outputs/r",
            ]
        )
        == 0
    )
    assert "jobs: train TRAIN_JOB" in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_out_in_an_unwritable_directory(paths: dict[str, Path], capsys) -> None:
    locked = paths["tmp"] / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code, err = run_cli(
            ["build", "finer-bench", "--scene-graphs", str(paths["graphs"]), "--out", str(locked / "b.csv")], capsys
        )
    finally:
        locked.chmod(stat.S_IRWXU)
    assert code == 2
    assert_one_error_line(err, "locked: permission denied")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            PermissionError(13, "Permission denied", "/data/out.json"),
            "/data/out.json: permission denied; choose a path you can access",
        ),
        (
            NotADirectoryError(20, "Not a directory", "/data/file/out"),
            "/data/file/out: a part of this path is a regular file",
        ),
        (IsADirectoryError(21, "Is a directory", "/data"), "/data: is a directory where a file is expected"),
        (FileExistsError(17, "File exists", "/data/x"), "/data/x: already exists"),
        (OSError(28, "No space left on device", "/data/x"), "/data/x: no space left on the device"),
    ],
    ids=["permission", "not-a-directory", "is-a-directory", "exists", "disk-full"],
)
def test_os_errors_are_one_line_naming_the_path(error: OSError, message: str, capsys) -> None:
    assert message in os_error_message(error)

    def fails() -> None:
        raise error

    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(fails)()
    assert exit_info.value.code == 2
    assert_one_error_line(capsys.readouterr().err, message)


def test_decoding_error_names_the_file_being_read(tmp_path: Path, capsys) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"ok\n\xff\xfe\n")

    def reads() -> None:
        with path.open(encoding="utf-8") as handle:
            handle.read()

    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(reads)()
    assert exit_info.value.code == 2
    assert_one_error_line(capsys.readouterr().err, f"{path}: not UTF-8 text")


# ---------------------------------------------------------------------------------------------- recipes

GRPO_CASES = [
    ("word-for-a-number", {"learning_rate": "fast"}, [], "learning_rate: invalid float value: 'fast'"),
    (
        "word-for-an-int-flag",
        {},
        ["--max_steps", "abc"],
        "command line: argument --max_steps/--max-steps: invalid int value: 'abc'",
    ),
    ("list-for-an-int", {"max_steps": [1, 2]}, [], "max_steps: expected one value, got [1, 2]"),
    (
        "string-for-a-list",
        {"reward_funcs": "accuracy"},
        [],
        "reward_funcs: expected a list, got 'accuracy' (write a list: [accuracy])",
    ),
    (
        "reward-weights-length",
        {"reward_weights": [1.0]},
        [],
        "reward_weights: 1 weight(s) [1.0] for 2 reward function(s)",
    ),
    ("negative-learning-rate", {"learning_rate": -1e-5}, [], "learning_rate: must be at least 0, got -1e-05"),
    (
        "unknown-eval-benchmark",
        {"eval_on_save": True, "eval_benchmarks": ["oric_bench_r2"]},
        [],
        "eval_benchmarks: unknown benchmark 'oric_bench_r2' (did you mean 'oric_bench_r1'?",
    ),
    (
        "unknown-reward",
        {"reward_funcs": ["acuracy"]},
        [],
        "reward_funcs: unknown reward 'acuracy' (did you mean 'accuracy'?)",
    ),
    (
        "word-for-a-bool",
        {"bf16": "maybe"},
        [],
        "bf16: Truthy value expected: got maybe but expected one of yes/no, true/false",
    ),
    (
        "persistent-workers-without-workers",
        {"dataloader_persistent_workers": True},
        ["--dataloader_num_workers", "0"],
        "dataloader_persistent_workers: true needs dataloader_num_workers of 1 or more, got 0",
    ),
]


def write_recipe(tmp_path: Path, base: str, changes: dict) -> Path:
    import yaml

    from core.recipe_file import read_recipe

    recipe = read_recipe(REPO_ROOT / "recipes" / base)  # its includes merged: the copy stands alone
    recipe.update(changes)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@pytest.mark.parametrize(
    ("changes", "flags", "message"), [case[1:] for case in GRPO_CASES], ids=[case[0] for case in GRPO_CASES]
)
def test_grpo_recipe_values_are_checked_before_any_model_loads(
    changes: dict, flags: list[str], message: str, tmp_path: Path, capsys
) -> None:
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    recipe = write_recipe(tmp_path, "miniature/tiny_oric_demo.yaml", changes)
    with pytest.raises(SystemExit) as exit_info:  # the entry script's own wrapping of the parser
        exit_on_user_error(parse_recipe)(
            [str(recipe), *flags], (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
        )
    assert exit_info.value.code == 2
    assert_one_error_line(capsys.readouterr().err, message)


DPO_CASES = [
    ("word-for-beta", {"beta": "high"}, "beta: invalid float value: 'high'"),
    ("negative-learning-rate", {"learning_rate": -1.0}, "learning_rate: must be at least 0, got -1.0"),
    ("zero-batch", {"per_device_train_batch_size": 0}, "per_device_train_batch_size: must be at least 1, got 0"),
]


@pytest.mark.parametrize(("changes", "message"), [case[1:] for case in DPO_CASES], ids=[case[0] for case in DPO_CASES])
def test_dpo_recipe_values_are_checked(changes: dict, message: str, tmp_path: Path) -> None:
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    recipe = write_recipe(tmp_path, "miniature/tiny_finer_demo.yaml", changes)
    with pytest.raises(UserError, match=None) as info:
        parse_recipe([str(recipe)], (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig))
    assert message in str(info.value)


def test_entry_script_bad_recipe_is_one_line(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, "miniature/tiny_oric_demo.yaml", {"max_steps": [1, 2]})
    result = subprocess.run(
        [sys.executable, "finetune/grpo.py", str(recipe)],
        cwd=REPO_ROOT,
        env=entry_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert_one_error_line(result.stderr, "max_steps: expected one value, got [1, 2]")


def test_readme_launch_command_with_a_bad_recipe_has_no_launcher_traceback(tmp_path: Path) -> None:
    """The README's launch line (DeepSpeed ZeRO-3, 8 processes; workers stop at the recipe, before any
    DeepSpeed or GPU work): the worker's status comes back and only its error line is printed."""
    readme = (REPO_ROOT / "README.md").read_text()
    line = next(
        line for line in readme.splitlines() if line.startswith("veritune launch ") and "finetune/grpo.py" in line
    )
    recipe = write_recipe(tmp_path, "qwen3vl_oric.yaml", {"learning_rate": "fast"})
    command = [sys.executable, "-m", "veritune.cli", *line.split()[1:]]
    command[command.index("recipes/qwen3vl_oric.yaml")] = str(recipe)
    result = subprocess.run(command, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        "Traceback" not in result.stderr
        and "CalledProcessError" not in result.stderr
        and "ChildFailedError" not in result.stderr
    )
    errors = {line for line in result.stderr.splitlines() if line.startswith("error:")}
    assert errors == {f"error: {recipe}: learning_rate: invalid float value: 'fast'"}, result.stderr[-3000:]


def test_sft_recipe_with_persistent_workers_and_no_worker_is_one_line(tmp_path: Path) -> None:
    """The warm-start recipe keeps one persistent data worker; overriding the workers to 0 alone is refused
    before any model loads, instead of torch's traceback at the first batch."""
    from finetune.configs import VerituneModelConfig, VerituneSFTConfig
    from finetune.recipe import parse_recipe
    from finetune.sft import SFTScriptArguments

    types = (SFTScriptArguments, VerituneSFTConfig, VerituneModelConfig)
    flags = ["--dataloader_num_workers", "0"]
    with pytest.raises(UserError) as info:
        parse_recipe([str(REPO_ROOT / "recipes" / "miniature" / "tiny_sft_warmstart.yaml"), *flags], types)
    assert "dataloader_persistent_workers: true needs dataloader_num_workers of 1 or more" in str(info.value)
    flags += ["--dataloader_persistent_workers", "false"]
    parse_recipe([str(REPO_ROOT / "recipes" / "miniature" / "tiny_sft_warmstart.yaml"), *flags], types)


# ---- every path a recipe names is checked before any model loads (finetune.training.check_run_paths)

ENTRY_RECIPES = {
    "grpo": "miniature/tiny_oric_demo",
    "dpo": "miniature/tiny_finer_demo",
    "sft": "miniature/tiny_sft_warmstart",
}
EVAL_HOOK = ["--eval_on_save", "true", "--eval_benchmarks", "pope"]
PATH_CASES = [
    ("dataset_path", ["--dataset_path", "{t}/gone/train.json"], "dataset_path: {t}/gone/train.json: no such file"),
    ("dataset_folder", ["--dataset_path", "{t}/gone"], "dataset_path: {t}/gone: no such file or directory"),
    ("image_root", ["--image_root", "{t}/no-images"], "image_root: {t}/no-images: no such directory"),
    ("image_root_a_file", ["--image_root", "{t}/train.json"], "image_root: {t}/train.json: a file, not a directory"),
    ("replay_path", ["--replay_path", "{t}/pope.json"], "replay_path: {t}/pope.json: no such file"),
    ("eval_data", [*EVAL_HOOK, "--eval_data", "pope={t}/pope.json"], "eval_data: pope: {t}/pope.json: no such file"),
    (
        "eval_data_root",
        [*EVAL_HOOK, "--eval_data_root", "{t}/benchmarks"],
        "eval_data_root: {t}/benchmarks: no such directory",
    ),
    (
        "eval_data_root_layout",
        [*EVAL_HOOK, "--eval_data_root", "{t}"],
        "eval_data_root: pope: {t}/pope: no such file or directory (expected pope/coco_pope_",
    ),
    (
        "eval_image_root",
        [*EVAL_HOOK, "--eval_data", "pope={t}/train.json", "--eval_image_root", "{t}/val-images"],
        "eval_image_root: {t}/val-images: no such directory",
    ),
    (
        "local_model",
        ["--model_name_or_path", "{t}/models/tiny"],
        "model_name_or_path: {t}/models/tiny: no such directory",
    ),
    (
        "relative_model",
        ["--model_name_or_path", "outputs/nowhere/qwen3vl"],
        "model_name_or_path: outputs/nowhere/qwen3vl: no such directory",
    ),
    ("model_a_file", ["--model_name_or_path", "{t}/train.json"], "model_name_or_path: {t}/train.json: not a directory"),
    (
        "offline_hub_model",
        ["--model_name_or_path", "someone/not-cached"],
        "model_name_or_path: 'someone/not-cached' is not a local directory and not in the Hugging Face cache, and "
        "HF_HUB_OFFLINE is set",
    ),
]


@pytest.fixture()
def run_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Overrides naming paths that exist: an empty model folder (were it loaded, the error would name it), a
    data file and an image folder; no model loader may run (each entry script's own binding is replaced)."""
    import importlib

    (tmp_path / "model").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "train.json").write_text("[]")

    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    for script in ENTRY_RECIPES:
        monkeypatch.setattr(importlib.import_module(f"finetune.{script}"), "get_model_and_processor", loaded)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO_ROOT)
    return ["--model_name_or_path", str(tmp_path / "model"), "--dataset_path", str(tmp_path / "train.json")] + [
        "--image_root",
        str(tmp_path / "images"),
        "--output_dir",
        str(tmp_path / "run"),
        "--report_to",
        "none",
    ]


def run_entry_in_process(script: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """``finetune/<script>.py RECIPE argv`` as its ``__main__`` runs it; the exit code."""
    import importlib

    module = importlib.import_module(f"finetune.{script}")
    names = {"grpo": "GRPOScriptArguments VerituneGRPOConfig", "dpo": "DPOScriptArguments VerituneDPOConfig"}
    names["sft"] = "SFTScriptArguments VerituneSFTConfig"
    types = tuple(getattr(module, name) for name in f"{names[script]} VerituneModelConfig".split())
    monkeypatch.setattr(sys, "argv", [f"finetune/{script}.py", f"recipes/{ENTRY_RECIPES[script]}.yaml", *argv])
    with pytest.raises(SystemExit) as exit_info:
        module.run_entry_script(module.main, types)
    return int(exit_info.value.code or 0)


@pytest.mark.parametrize(("flags", "message"), [case[1:] for case in PATH_CASES], ids=[case[0] for case in PATH_CASES])
def test_a_missing_path_of_the_recipe_stops_grpo_before_any_model_loads(
    flags: list[str],
    message: str,
    run_inputs: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = [flag.replace("{t}", str(tmp_path)) for flag in flags]
    assert run_entry_in_process("grpo", [*run_inputs, *flags], monkeypatch) == 2
    assert_one_error_line(capsys.readouterr().err, message.replace("{t}", str(tmp_path)))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("script", ["dpo", "sft"])
def test_dpo_and_sft_check_the_recipes_paths_before_any_model_loads(
    script: str,
    run_inputs: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for flags, message in (
        (["--dataset_path", f"{tmp_path}/gone.jsonl"], f"dataset_path: {tmp_path}/gone.jsonl: no such file"),
        (["--model_name_or_path", f"{tmp_path}/gone"], f"model_name_or_path: {tmp_path}/gone: no such directory"),
    ):
        assert run_entry_in_process(script, [*run_inputs, *flags], monkeypatch) == 2
        assert_one_error_line(capsys.readouterr().err, message)
    if script == "dpo":
        flags = ["--eval_dataset_path", f"{tmp_path}/val.jsonl"]
        assert run_entry_in_process(script, [*run_inputs, *flags], monkeypatch) == 2
        assert_one_error_line(capsys.readouterr().err, f"eval_dataset_path: {tmp_path}/val.jsonl: no such file")


def test_paths_the_run_will_not_read_and_hub_ids_pass_the_check(
    run_inputs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eval paths without an eval hook, a final benchmark whose files are not under eval_data_root (reported
    at the start, skipped at the end: docs/EVALUATION.md) and a Hub id online (left to the Hub, no probe)."""
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe
    from finetune.training import check_run_paths

    def parsed(*flags: str) -> tuple:
        types = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
        script_args, _, model_args = parse_recipe(["recipes/miniature/tiny_oric_demo.yaml", *run_inputs, *flags], types)
        return script_args, model_args

    check_run_paths(*parsed("--eval_benchmarks", "pope", "--eval_data_root", str(tmp_path / "benchmarks")))
    check_run_paths(*parsed("--eval_final_benchmarks", "general", "--eval_data_root", str(tmp_path)))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("core.hub.hub_reachable", lambda *_: pytest.fail("the Hub was probed"))
    check_run_paths(*parsed("--model_name_or_path", "Qwen/Qwen3-VL-8B-Instruct"))


def test_grpo_with_a_missing_dataset_stops_in_one_line_before_the_model(tmp_path: Path) -> None:
    """The real entry script: its model folder exists but is empty, so had the model (or its processor) been
    loaded before the data were checked, the error would name the model."""
    (tmp_path / "model").mkdir()
    result = subprocess.run(
        [sys.executable, "finetune/grpo.py", "recipes/miniature/tiny_oric_demo.yaml", "--model_name_or_path"]
        + [str(tmp_path / "model"), "--dataset_path", "data/oric/missing_train.json", "--image_root", str(tmp_path)]
        + ["--output_dir", str(tmp_path / "run"), "--report_to", "none"],
        cwd=REPO_ROOT,
        env=entry_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2
    assert_one_error_line(result.stderr, "dataset_path: data/oric/missing_train.json: no such file")
    assert "model" not in result.stderr.splitlines()[-1]


def test_eval_run_report_to_wandb_without_credentials_stops_before_the_model(tmp_path: Path) -> None:
    """No WANDB_MODE, no key, a home without a netrc: one line before any benchmark or model loads (the model
    folder is empty: loading it would fail naming --model) and no prediction written."""
    from eval_fixtures import write_oric_bench

    from core.wandb_login import LOGIN_HINT

    data, _ = write_oric_bench(tmp_path / "bench", questions=2)
    (tmp_path / "model").mkdir()
    (tmp_path / "home").mkdir()
    env = entry_env(HOME=str(tmp_path / "home"), WANDB_CONFIG_DIR=str(tmp_path / "home" / ".config" / "wandb"))
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_DISABLED", "NETRC"):
        env.pop(name, None)
    command = [sys.executable, "-m", "veritune.cli", "eval", "run", "--model", str(tmp_path / "model")]
    command += ["--benchmarks", "oric_bench", "--data", f"oric_bench={data}", "--out", str(tmp_path / "out")]
    result = subprocess.run(
        [*command, "--report-to", "wandb"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: --report-to wandb, but W&B has no credentials here: {LOGIN_HINT}, or drop --report-to wandb"
    )
    assert not (tmp_path / "out").exists()
