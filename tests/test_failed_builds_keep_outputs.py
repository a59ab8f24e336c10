"""A failed or killed build never costs the previous one: every builder checks its inputs, flags,
judge and LLM endpoint before it looks at ``--out``, builds beside the output and replaces it only when the
new build is ready. Table-driven like tests/test_bad_input.py: each bad input runs against an empty ``--out``,
against one holding an earlier build, and against that build with ``--force``; the error names the real
culprit and the earlier build and its manifest are byte-identical afterwards."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeChatServer
from helpers import REPO_ROOT, entry_env
from test_finer_builder import GRAPH

from core.io import STAGING_SUFFIX, recover_output
from core.lock import LOCK_SUFFIX
from data_builders.oric.annotations import ImageRecord
from veritune.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    return int(code or 0), capsys.readouterr().err


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------- earlier builds

# Where each builder's output lies inside its folder, and whether it is a directory.
OUTPUTS = {
    "oric": ("oric_train.json", False),
    "oric-bench": ("oric_bench.json", False),
    "finer": ("finer", True),
    "finer-bench": ("finer.csv", False),
    "scene-graphs": ("graphs.json", False),
    "synthetic-world": ("world", True),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from miniature.tiny.clip import build_tiny_clip
    from miniature.world import build_synthetic_world

    root = tmp_path_factory.mktemp("keep-world")
    paths = build_synthetic_world(root / "world", num_train_images=16, num_val_images=16)
    paths["clip"] = build_tiny_clip(root / "clip")
    paths["root"] = root
    images = root / "caption-images"
    images.mkdir()
    shutil.copy(next(paths["train_images"].iterdir()), images / "dog.jpg")
    paths["caption_images"] = images
    captions = root / "captions.jsonl"
    captions.write_text(json.dumps({"image": "dog.jpg", "caption": "A brown dog is lying on a red rug."}) + "\n")
    paths["captions"] = captions
    return paths


def good_args(world: dict[str, Path], builder: str, out: Path) -> list[str]:
    """A command of ``builder`` that succeeds (tiny sizes), writing ``out``."""
    if builder in ("oric", "oric-bench"):
        split = "train" if builder == "oric" else "val"
        return [
            "build",
            builder,
            "--annotations",
            str(world[f"{split}_annotations"]),
            "--image-root",
            str(world[f"{split}_images"]),
            "--out",
            str(out),
            *("--num-yes", "3", "--num-no", "3", "--yes-per-image", "1", "--no-per-image", "1"),
            *("--context-judge-threshold", "0.5", "--clip-model", str(world["clip"])),
            *("--clip-cache", str(world["root"] / "clip-cache")),
        ]
    if builder == "finer":
        return [
            "build",
            "finer",
            "--scene-graphs",
            str(world["train_scene_graphs"]),
            "--image-root",
            str(world["train_images"]),
            "--out",
            str(out),
            "--max-tuples",
            "40",
        ]
    if builder == "finer-bench":
        return ["build", "finer-bench", "--scene-graphs", str(world["val_scene_graphs"]), "--out", str(out)]
    if builder == "scene-graphs":
        return ["build", "scene-graphs", "--annotations", str(world["val_annotations"]), "--out", str(out)]
    return ["build", "synthetic-world", "--out", str(out), "--train-images", "3", "--val-images", "2"]


@pytest.fixture(scope="module")
def earlier(world: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A folder per builder holding one finished build (copied for each test)."""
    folders = {}
    for builder, (name, _) in OUTPUTS.items():
        folder = tmp_path_factory.mktemp(f"earlier-{builder}")
        assert main(good_args(world, builder, folder / name)) == 0, builder
        folders[builder] = folder
    return folders


# ---------------------------------------------------------------------------------------------- bad inputs


def _coco(world: dict[str, Path], change: Callable[[dict[str, Any]], None]) -> bytes:
    data = json.loads(world["train_annotations"].read_text())
    change(data)
    return json.dumps(data).encode()


def _negative_width(data: dict[str, Any]) -> None:
    data["annotations"][0]["bbox"][2] = -3.0


def _unknown_category(data: dict[str, Any]) -> None:
    data["annotations"][0]["category_id"] = 999


def _dangling(graphs: list[dict[str, Any]]) -> bytes:
    graph = json.loads(json.dumps(GRAPH))
    graph["objects"][0]["parsed_relation"][0]["object_b"] = 7
    return json.dumps([*graphs, graph]).encode()


BAD_FILES: dict[str, Callable[[dict[str, Path]], bytes | None]] = {
    "missing": lambda world: None,
    "truncated": lambda world: world["train_annotations"].read_bytes()[:200],
    "not-json": lambda world: b"images: this is YAML, not JSON\n",
    "not-utf8": lambda world: b'{"images": [], "categories": [{"id": 1, "name": "caf\xe9"}], "annotations": []}',
    "negative-width": lambda world: _coco(world, _negative_width),
    "unknown-category": lambda world: _coco(world, _unknown_category),
    "dangling-relation": lambda world: _dangling(json.loads(world["val_scene_graphs"].read_text())),
    "bad-captions-line": lambda world: world["captions"].read_bytes() + b'{"image": "dog.jpg", "caption": \n',
}

# An endpoint for each failure (None: nothing listens; "slow": a socket that never answers); the judge is asked
# with --llm-max-retries 0 and --llm-timeout 0.5.
ENDPOINTS: dict[str, Callable[[dict[str, Any]], Any] | None] = {
    "down": None,
    "slow": None,
    "401": lambda request: (401, '{"error": {"message": "Incorrect API key provided"}}'),
    "500": lambda request: (500, '{"error": "boom"}'),
    "html": lambda request: (200, "<html><body><h1>Welcome to nginx!</h1></body></html>"),
    "empty-choices": lambda request: (200, '{"choices": []}'),
}

FILE_FLAGS = {
    "oric": "--annotations",
    "oric-bench": "--annotations",
    "scene-graphs": "--annotations",
    "finer": "--scene-graphs",
    "finer-bench": "--scene-graphs",
}

# (id, builder, what is wrong: ("file", BAD_FILES key) | ("llm", ENDPOINTS key) | ("flags", [...]), message)
CASES: list[tuple[str, str, tuple[str, Any], str]] = [
    ("oric-missing-annotations", "oric", ("file", "missing"), "annotation file not found"),
    ("oric-truncated-annotations", "oric", ("file", "truncated"), "not valid JSON"),
    ("oric-non-json-annotations", "oric", ("file", "not-json"), "not valid JSON"),
    ("oric-non-utf8-annotations", "oric", ("file", "not-utf8"), "not UTF-8 text"),
    ("oric-negative-box-width", "oric", ("file", "negative-width"), "box with zero or negative size"),
    ("oric-unknown-category", "oric", ("file", "unknown-category"), "unknown category_id 999"),
    ("oric-unknown-judge", "oric", ("flags", ["--context-judge", "coocurrence"]), "unknown judge 'coocurrence'"),
    ("oric-llm-down", "oric", ("llm", "down"), "unreachable after 1 attempts"),
    ("oric-llm-slow", "oric", ("llm", "slow"), "unreachable after 1 attempts (APITimeoutError"),
    ("oric-llm-401", "oric", ("llm", "401"), "refused the request: HTTP 401 (check the API key"),
    ("oric-llm-500", "oric", ("llm", "500"), "the server answered HTTP 500"),
    ("oric-llm-html", "oric", ("llm", "html"), "without an answer"),
    ("oric-llm-empty-choices", "oric", ("llm", "empty-choices"), "without an answer (IndexError)"),
    ("oric-bench-missing-annotations", "oric-bench", ("file", "missing"), "annotation file not found"),
    ("oric-bench-unknown-category", "oric-bench", ("file", "unknown-category"), "unknown category_id 999"),
    ("oric-bench-llm-401", "oric-bench", ("llm", "401"), "HTTP 401"),
    ("finer-missing-scene-graphs", "finer", ("file", "missing"), "not found (or not a file)"),
    ("finer-truncated-scene-graphs", "finer", ("file", "truncated"), "not valid JSON"),
    ("finer-non-utf8-scene-graphs", "finer", ("file", "not-utf8"), "not UTF-8"),
    ("finer-dangling-relation", "finer", ("file", "dangling-relation"), "points to missing object object_b 7"),
    ("finer-bad-captions-line", "finer", ("captions", "bad-captions-line"), ", line 2: not valid JSON"),
    ("finer-captions-llm-down", "finer", ("llm", "down"), "unreachable after 1 attempts"),
    ("finer-captions-llm-500", "finer", ("llm", "500"), "the server answered HTTP 500"),
    ("finer-captions-llm-empty-choices", "finer", ("llm", "empty-choices"), "without an answer"),
    ("finer-bench-missing-scene-graphs", "finer-bench", ("file", "missing"), "not found (or not a file)"),
    ("finer-bench-non-json", "finer-bench", ("file", "not-json"), "not valid JSON"),
    ("finer-bench-dangling-relation", "finer-bench", ("file", "dangling-relation"), "points to missing object"),
    ("scene-graphs-missing-annotations", "scene-graphs", ("file", "missing"), "annotation file not found"),
    ("scene-graphs-non-utf8", "scene-graphs", ("file", "not-utf8"), "not UTF-8 text"),
    ("scene-graphs-negative-box-width", "scene-graphs", ("file", "negative-width"), "box with zero or negative"),
    ("scene-graphs-unknown-category", "scene-graphs", ("file", "unknown-category"), "unknown category_id 999"),
    ("world-bad-rate", "synthetic-world", ("flags", ["--in-context-rate", "1.5"]), "in_context_rate: expected"),
    ("world-negative-count", "synthetic-world", ("flags", ["--val-images", "-1"]), "num_val_images: expected"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _replace_flag(argv: list[str], flag: str, value: str) -> list[str]:
    index = argv.index(flag)
    return [*argv[: index + 1], value, *argv[index + 2 :]]


def bad_command(
    world: dict[str, Path], builder: str, problem: tuple[str, Any], out: Path, scratch: Path, base_url: str | None
) -> list[str]:
    """The good command of ``builder`` with the one mistake of ``problem``."""
    kind, which = problem
    argv = good_args(world, builder, out)
    if kind == "flags":
        return [*argv, *which]
    if kind == "file":
        content = BAD_FILES[which](world)
        path = scratch / f"{which}.json"
        if content is not None:
            path.write_bytes(content)
        return _replace_flag(argv, FILE_FLAGS[builder], str(path))
    llm = ["--llm-max-retries", "0", "--llm-timeout", "0.5", "--llm-cache", str(scratch / "llm.sqlite")]
    llm += ["--llm-base-url", base_url or "", "--llm-model", "judge", "--llm-api-key-env", "VERITUNE_TEST_NO_KEY"]
    if builder == "finer":  # the LLM path: captions
        captions = world["captions"]
        if kind == "captions":
            captions = scratch / "captions.jsonl"
            captions.write_bytes(BAD_FILES[which](world))
        argv = _replace_flag(argv, "--image-root", str(world["caption_images"]))
        index = argv.index("--scene-graphs")
        return [*argv[:index], "--captions", str(captions), *argv[index + 2 :], *llm]
    return [*argv, "--context-judge", "openai", *llm]


SCENARIOS = ("empty-out", "earlier-build", "earlier-build-force")


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize(
    ("builder", "problem", "message"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_bad_input_names_its_culprit_and_keeps_the_earlier_build(
    builder: str,
    problem: tuple[str, Any],
    message: str,
    scenario: str,
    world: dict[str, Path],
    earlier: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    folder = tmp_path / "out"
    if scenario == "empty-out":
        folder.mkdir()
    else:
        shutil.copytree(earlier[builder], folder)
    before = snapshot(folder)
    name, _ = OUTPUTS[builder]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    endpoint = ENDPOINTS.get(problem[1]) if problem[0] == "llm" else None
    server = FakeChatServer(endpoint) if endpoint is not None else None
    silent = socket.socket()  # "slow": connections are queued by the kernel and never answered
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    base_url = server.base_url if server else f"http://127.0.0.1:{_free_port()}/v1"
    if problem == ("llm", "slow"):
        base_url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    argv = bad_command(world, builder, problem, folder / name, scratch, base_url)
    if scenario.endswith("force"):
        argv.append("--force")
    if server:
        with server:
            code, err = run_cli(argv, capsys)
    else:
        code, err = run_cli(argv, capsys)
    silent.close()
    assert code == 2 and "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], err[-3000:]
    assert "holds a build" not in errors[0] and "--out" not in errors[0]
    assert snapshot(folder) == before, "the earlier build (or the empty --out) was changed"
    assert not list(folder.glob(f"*{STAGING_SUFFIX}"))


# ---------------------------------------------------------------------------------------------- failures later on


class AlwaysYes:
    """A judge that finds every object predictable from its context: the build fails after its real work."""

    name = "always-yes"

    def __init__(self, images: list[ImageRecord], **options: object) -> None:
        pass

    def __call__(self, queries: list) -> list[str]:
        return ["yes"] * len(queries)

    def describe(self) -> dict[str, str]:
        return {"name": self.name}


def test_force_build_that_fails_midway_keeps_the_earlier_build(
    world: dict[str, Path], earlier: dict[str, Path], tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "out"
    shutil.copytree(earlier["oric"], folder)
    before = snapshot(folder)
    argv = [*good_args(world, "oric", folder / "oric_train.json"), "--context-judge", f"{__name__}.AlwaysYes"]
    code, err = run_cli([*argv, "--force"], capsys)
    assert code == 2 and "nothing usable was built" in err
    assert snapshot(folder) == before


def test_typo_then_force_keeps_earlier_build(world: dict[str, Path], earlier: dict[str, Path], tmp_path: Path, capsys):
    folder = tmp_path / "out"
    shutil.copytree(earlier["oric"], folder)
    before = snapshot(folder)
    argv = _replace_flag(good_args(world, "oric", folder / "oric_train.json"), "--annotations", "/tmp/nope.json")
    for extra in ([], ["--force"]):
        code, err = run_cli([*argv, *extra], capsys)
        assert code == 2 and "error: annotation file not found: /tmp/nope.json" in err
        assert snapshot(folder) == before


def test_orphaned_manifest_is_reported_as_such(
    world: dict[str, Path], earlier: dict[str, Path], tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "out"
    shutil.copytree(earlier["finer-bench"], folder)
    (folder / "finer.csv").unlink()
    argv = [*good_args(world, "finer-bench", folder / "finer.csv"), "--seed", "5"]
    code, err = run_cli(argv, capsys)
    manifest = folder / "finer.manifest.json"
    assert code == 2 and f"manifest {manifest} describes a build whose output is missing" in err
    assert "other inputs" not in err
    assert run_cli([*argv, "--force"], capsys)[0] == 0
    assert json.loads(manifest.read_text())["build"]["settings"]["seed"] == 5 and (folder / "finer.csv").is_file()


def test_good_force_rebuild_replaces_the_build_and_stale_companions(
    world: dict[str, Path], earlier: dict[str, Path], tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "out"
    shutil.copytree(earlier["scene-graphs"], folder)
    (folder / "graphs.json").write_text("[]\n")  # damaged: the same build again rewrites it
    argv = good_args(world, "scene-graphs", folder / "graphs.json")
    assert run_cli(argv, capsys)[0] == 0  # the same identity: rebuilt in place
    assert snapshot(folder) == snapshot(earlier["scene-graphs"])


# ---------------------------------------------------------------------------------------------- kill -9

# Runs the CLI with os.replace / os.unlink / shutil.rmtree / the directory exchange counted; the KILL_AT-th
# call kills the process with SIGKILL just before it happens (0: never; the count goes to stderr).
KILLER = r"""
import os, shutil, signal, sys
limit = int(os.environ["KILL_AT"])
calls = [0]
def counted(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
os.replace, os.unlink, shutil.rmtree = counted(os.replace), counted(os.unlink), counted(shutil.rmtree)
import core.io as io
io._exchange = counted(io._exchange)
from veritune.cli import main
code = main(sys.argv[1:])
sys.stderr.write(f"CALLS {calls[0]}\n")
sys.exit(code)
"""


def _run_killed(argv: list[str], kill_at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", KILLER, *argv],
        cwd=REPO_ROOT,
        env=entry_env(KILL_AT=str(kill_at)),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("builder", ["finer-bench", "finer"])
def test_kill_9_during_force_rebuild_leaves_old_or_new(
    builder: str, world: dict[str, Path], earlier: dict[str, Path], tmp_path: Path
) -> None:
    """Killed at every rename, unlink and removal of a --force rebuild (the build's own writes included): the
    output is always whole, the old build or the new one, and after the next command's recovery the output
    and its manifest belong to the same build."""
    name, is_dir = OUTPUTS[builder]
    old = snapshot(earlier[builder])

    def command(folder: Path) -> list[str]:
        return [*good_args(world, builder, folder / name), "--seed", "9", "--force"]

    reference = tmp_path / "reference"
    shutil.copytree(earlier[builder], reference)
    done = _run_killed(command(reference), 0)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = int(done.stderr.rsplit("CALLS ", 1)[1].split()[0])
    new = {path: data for path, data in snapshot(reference).items() if STAGING_SUFFIX not in path}
    assert new != old and calls >= 4

    def visible(state: dict[str, bytes]) -> dict[str, bytes]:
        # the killed build's lock file stays, unlocked (core.lock): no part of the output
        return {path: data for path, data in state.items() if STAGING_SUFFIX not in path and LOCK_SUFFIX not in path}

    def parts(state: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """(the output, its manifest): for a directory output, everything inside it and nothing."""
        if is_dir:
            return state, {}
        manifest = name.rsplit(".", 1)[0] + ".manifest.json"
        return {name: state.get(name, b"")}, {manifest: state.get(manifest, b"")}

    for kill_at in range(1, calls + 1):
        folder = tmp_path / f"kill-{kill_at}"
        shutil.copytree(earlier[builder], folder)
        result = _run_killed(command(folder), kill_at)
        assert result.returncode == -9, (kill_at, result.stderr[-2000:])
        state = visible(snapshot(folder))
        output, manifest = parts(state)
        assert output in (parts(old)[0], parts(new)[0]), f"killed at call {kill_at}: the output is neither"
        assert manifest in (parts(old)[1], parts(new)[1]), f"killed at call {kill_at}: the manifest is neither"
        recover_output(folder / name)
        assert visible(snapshot(folder)) in (old, new), f"killed at call {kill_at}: a mix after recovery"


# ---------------------------------------------------------------------------------------------- recipe paths

DEMO_RECIPE = REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"
SUBMIT = ["slurm", "submit", "--entry", "grpo", "--recipe", str(DEMO_RECIPE), "--run-dir", "r"]

# Run from a folder outside the repository: each flag's own mistake is the error, not the accelerate config.
SUBMIT_CASES = [
    (
        "unknown-benchmark",
        ["--eval-benchmarks", "popee", "--eval-data-root", "d", "--dry-run"],
        "--eval-benchmarks: unknown benchmark 'popee'",
    ),
    ("no-eval-data-root", ["--eval-benchmarks", "pope", "--dry-run"], "--eval-benchmarks needs --eval-data-root"),
    ("no-sbatch", [], "sbatch not found"),
]


@pytest.mark.parametrize(("extra", "message"), [case[1:] for case in SUBMIT_CASES], ids=[c[0] for c in SUBMIT_CASES])
def test_slurm_submit_from_another_directory_names_the_real_mistake(
    extra: list[str], message: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    code, err = run_cli([*SUBMIT, *extra], capsys)
    assert code == 2 and "Traceback" not in err
    assert message in err and "accelerate" not in err, err


def test_repository_relative_recipe_paths_resolve_from_any_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import load_recipe, parse_recipe

    types = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
    monkeypatch.chdir(REPO_ROOT)
    here = load_recipe(DEMO_RECIPE, types)
    assert here["accelerate_config"] == "recipes/accelerate/single.yaml"  # as written, from the repository
    monkeypatch.chdir(tmp_path)
    elsewhere = load_recipe(DEMO_RECIPE, types)
    assert elsewhere["accelerate_config"] == str(REPO_ROOT / "recipes/accelerate/single.yaml")
    script_args, *_ = parse_recipe([str(DEMO_RECIPE), "--use_cpu", "true"], types)
    assert Path(script_args.accelerate_config).is_file()

    assert main([*SUBMIT, "--dry-run"]) == 0
    train = f"slurm/train.sbatch grpo {DEMO_RECIPE} {REPO_ROOT / 'recipes/accelerate/single.yaml'}"
    assert train in capsys.readouterr().out  # the job gets the config found in the recipe's repository

    broken = tmp_path / "recipes" / "broken.yaml"
    broken.parent.mkdir()
    broken.write_text("accelerate_config: recipes/accelerate/nope.yaml\n")
    code, err = run_cli(["slurm", "submit", "--entry", "grpo", "--recipe", str(broken), "--dry-run"], capsys)
    assert code == 2 and "accelerate_config: recipes/accelerate/nope.yaml does not exist (looked in: " in err
    assert str(tmp_path / "recipes" / "recipes/accelerate/nope.yaml") in err
