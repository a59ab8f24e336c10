"""The stages of the CPU miniature (``miniature.pipeline`` runs them in order): each stage function takes
``demo_paths(out)``, is keyed by what makes its output (:func:`stage_key`, :func:`run_stage`) and runs the
framework's own commands (``veritune build ...``, ``finetune/sft.py``, ``finetune/grpo.py``, ``finetune/dpo.py``)
as subprocesses.

The stages are ``build_world``, ``build_tiny_models``, ``build_data``, ``warm_start``, ``build_oric``,
``train_grpo``, ``build_finer``, ``train_dpo``; ``veritune demo-select`` (``miniature.selection``) runs the same
stages on the dev split, and ``miniature.finer_half`` (``--finer seeing``) builds on :func:`run_stage`,
:func:`launch` and :func:`run_veritune`. The command line of all three lives in ``veritune.demo_cli``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.cache import cache_root, publish_dir
from core.errors import PARENT_SAYS_INTERRUPTED_ENV, UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
RECIPE = "recipes/miniature/tiny_oric_miniature.yaml"
SFT_RECIPE = "recipes/miniature/tiny_sft_warmstart.yaml"
# The warm-start table's flags, as SFT_RECIPE's comment shows them, and the module that generates it
WARMSTART_DATA_FLAGS = ("--questions-per-image", "2", "--no-captions", "--answer-styles", "plain")
WARMSTART_GENERATOR = REPO_ROOT / "miniature" / "warmstart_data.py"
DPO_RECIPE = "recipes/miniature/tiny_finer_demo.yaml"
ACCELERATE_CONFIG = "recipes/accelerate/single.yaml"
CACHE = cache_root()
STAGES_DIR = "stages"  # OUT/stages/<stage>.json: the key each stage's output was built with
# The before/after table: (benchmark, metric) in the units the scorers report.
# the FINER hook's limit (120 q+/q- pairs, a seeded sample stratified over FINER's settings) and DPO steps
FINER_QUESTIONS, DPO_STEPS = 240, 16
# FINER's half of the demo: DPO on image-contrast pairs from a base that sees per-instance attributes
# (miniature.finer_half; the default), or DPO on FINER-Tuning's tuples from the ORIC half's base, which cannot see
# them: a control that shows DPO has nothing to cure where the base does not perceive the attribute
FINER_HALVES = ("seeing", "tuples")
TRAIN_IMAGES, VAL_IMAGES = 1000, 240  # the world's splits; POPE-random-style questions: every one of the val split
DEV_IMAGES = 240  # a third split, held out from training and benchmarks: hyperparameters are selected on it
ORIC_TRAIN_PER_ANSWER, ORIC_BENCH_PER_ANSWER = 300, 60  # the paper's 600 training questions (300 yes, 300 no)
TABLE = [
    ("oric_bench", "macro/f1"),
    ("oric_bench", "yes_proportion"),
    ("pope", "accuracy"),
    ("finer", "paired_accuracy"),
    # FINER's yes/no probe (the FINER paper, arXiv 2603.17662, Sec. 1, Fig. 1): negatives at the fine levels,
    # both twins of a pair right, and the positives (an "always no" drift shows there)
    ("finer_yn", "neg_accuracy_l3_l7"),
    ("finer_yn", "paired_accuracy"),
    ("finer_yn", "pos_accuracy"),
]


def announce_stage(message: str) -> None:
    print(f"\n==> {message}", flush=True)


SUMMARY_LINES = ("tiny CLIP:", "wrote ", "no shared images", "done:")  # a background log's lines for the terminal
_OUTPUT = threading.local()  # .log: where a background stage's commands write (the foreground prints)


def run_command(command: list[str]) -> None:
    wait_commands([start_command(command)])


def start_command(command: list[str]) -> tuple[list[str], subprocess.Popen]:
    """Start ``command`` from the repository root, its output to the terminal or to this thread's stage log."""
    log = getattr(_OUTPUT, "log", None)
    line = "$ " + " ".join(command)
    if log is None:
        print(line, flush=True)
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "offline")
    env.setdefault("OMP_NUM_THREADS", "1")  # pin_threads: one torch thread per process
    env[PARENT_SAYS_INTERRUPTED_ENV] = "1"  # on Ctrl-C the demo says "interrupted", not each stage again
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if log is None:
        return command, subprocess.Popen(command, cwd=REPO_ROOT, env=env)
    with log.open("a") as stream:
        stream.write(line + "\n")
        stream.flush()
        return command, subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=stream, stderr=subprocess.STDOUT)


def wait_commands(started: list[tuple[list[str], subprocess.Popen]]) -> None:
    for command, process in started:
        if process.wait() != 0:
            raise UserError(f"demo step failed (exit {process.returncode}): {' '.join(command)}")


class Background:
    """A stage run in a thread beside the foreground one (the warm-start and GRPO each keep one core busy and
    leave the other mostly idle); its commands write to ``log``, whose tail is shown if it fails. ``join``
    re-raises its error, or prints the log's summary lines."""

    def __init__(self, name: str, log: Path, stage: Callable[[], None]) -> None:
        self.name, self.log, self.error, self.seconds = name, log, None, 0.0
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        print(f"(in the background: {name}; output in {log})", flush=True)

        def run() -> None:
            _OUTPUT.log = log
            start = time.monotonic()
            try:
                stage()
            except BaseException as error:  # noqa: BLE001 - handed to the foreground by join()
                self.error = error
            self.seconds = round(time.monotonic() - start, 1)

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def join(self, progress_every: float | None = None) -> None:
        """Wait for the stage; with ``progress_every`` (seconds), meanwhile print its log's latest progress line
        that often, so a long wait on the terminal is not a silent one."""
        while self.thread.is_alive():
            self.thread.join(timeout=progress_every)
            line = latest_progress(self.log) if progress_every and self.thread.is_alive() else None
            if line:
                print(f"  ({self.name}) {line}", flush=True)
        if self.error is not None:
            tail = self.log.read_text().splitlines()[-15:]
            print("\n".join(tail), file=sys.stderr, flush=True)
            if isinstance(self.error, UserError):
                raise UserError(f"{self.name} (log: {self.log}): {self.error}") from self.error
            raise self.error
        # what the stage built, as the foreground would have printed it
        summary = [
            line[line.index("eval at step") :] if "INFO veritune.eval: eval at step" in line else line
            for line in self.log.read_text().splitlines()
            if line.startswith(SUMMARY_LINES) or "INFO veritune.eval: eval at step" in line
        ]
        print("\n".join([f"{self.name}, run in the background ({self.log}):", *summary]), flush=True)


def start_in_thread(work: Callable[[], None]) -> Callable[[], None]:
    """Start ``work`` in a thread beside the caller, its commands' output in the caller's stage log; returns the
    function that waits for it and re-raises its error. For stages that a chain needs later and that need none of
    what the chain builds meanwhile (the FINER half's pairs and probe beside its base)."""
    log, errors = getattr(_OUTPUT, "log", None), []

    def run() -> None:
        _OUTPUT.log = log
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - re-raised by the caller's join
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> None:
        thread.join()
        if errors:
            raise errors[0]

    return join


PROGRESS = re.compile(r"^(step \d+/\d+.*|vision pretraining step \d+/\d+.*|\$ .*|wrote .*|eval at step .*)$")


def latest_progress(log: Path, tail_bytes: int = 16384) -> str | None:
    """The last progress line of a stage log (a training step, the command started, a file written, an eval),
    shortened for the terminal; None when there is none yet."""
    try:
        with log.open("rb") as stream:
            stream.seek(max(stream.seek(0, os.SEEK_END) - tail_bytes, 0))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = re.split(r"[\r\n]+", text)
    for line in reversed(lines if text.endswith(("\n", "\r")) else lines[:-1]):  # not a line still being written
        line = line.split("INFO veritune.eval: ", 1)[-1].strip()
        if PROGRESS.match(line):
            return line if len(line) <= 160 else line[:157] + "..."
    return None


def run_veritune(*args: str) -> None:
    run_command([sys.executable, "-m", "veritune.cli", *args])


def recipe_accelerate_config(recipe: str) -> str:
    """The recipe's ``accelerate_config`` key (its includes merged), or one process
    (``recipes/accelerate/single.yaml``)."""
    from core.recipe_file import recipe_path_value

    return recipe_path_value(REPO_ROOT / recipe, "accelerate_config") or ACCELERATE_CONFIG


def launch(script: str, recipe: str, overrides: list[str]) -> None:
    launcher = [sys.executable, "-m", "veritune.launch"]  # accelerate launch, without its traceback on failure
    launcher += ["--config_file", recipe_accelerate_config(recipe)]
    run_command([*launcher, script, recipe, *overrides])


def copy_dir(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` beside it, then renamed: a demo killed while copying leaves no half-copied
    folder that looks complete."""
    partial = target.with_name(f".{target.name}.partial")
    _remove(partial)
    shutil.copytree(source, partial)
    _remove(target)
    os.rename(partial, target)


def pin_threads() -> None:
    """One torch thread, here (the tiny CLIP trains in this process) and in every subprocess, unless
    ``OMP_NUM_THREADS`` says otherwise: float sums then do not depend on the core count, so the numbers in
    docs/RESULTS.md reproduce (the tiny CLIP trained on two threads picks other ORIC negatives than on one)."""
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# ---------------------------------------------------------------------------------------------- stage keys

STAGE_STATUS: dict[str, str] = {}  # stage -> "reused" / "shared cache" / "run", for this process's summary


def stage_key(*parts: Any, out: Path | None = None) -> str:
    """A short hash of what makes a stage's output: its arguments, the files it reads, the keys of the stages
    it builds on. Paths under ``out`` (the demo's directory) count relative to it, so a demo directory copied or
    moved elsewhere keeps its keys: a rerun there reuses what is unchanged."""
    text = json.dumps(parts, default=str, sort_keys=True)
    if out is not None:
        text = re.sub(re.escape(str(out)) + r'(?=[/"])', "$OUT", text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stage_record(out: Path, name: str) -> Path:
    return out / STAGES_DIR / f"{name}.json"


def recorded_key(out: Path, name: str) -> str | None:
    """The key stage ``name``'s output under ``out`` was built with (None: not built, or by an older demo)."""
    try:
        return json.loads(_stage_record(out, name).read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def claim_demo_dir(out: Path, flag: str = "--out") -> None:
    """Check that ``out`` may hold a demo, then mark it as one: missing, empty, or a demo's (its ``stages/``
    records, from which :func:`run_stage` replaces only the outputs of stages rebuilt); never a folder
    :mod:`core.ownership` protects.

    Raises:
        UserError: ``out`` holds files no demo wrote, or is a protected folder.
    """
    from core.ownership import check_replaceable

    check_replaceable(out, flag, (STAGES_DIR,), "a veritune demo")
    (out / STAGES_DIR).mkdir(parents=True, exist_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def run_stage(
    out: Path, name: str, key: str, outputs: list[Path], done: Callable[[], bool], build: Callable[[], None]
) -> bool:
    """Run stage ``name`` unless its ``outputs`` are complete (``done``) and were built with ``key``; outputs
    built with another key (other arguments or inputs), or by an older demo that recorded none, are removed
    first. Returns True when the stage was reused; the status goes to :data:`STAGE_STATUS`."""
    from core.io import atomic_write_json

    previous = recorded_key(out, name)
    if previous == key and done():
        STAGE_STATUS.setdefault(name, "reused")  # built earlier in this process: it stays "run"
        return True
    if previous != key:
        for output in outputs:
            _remove(output)
    atomic_write_json(_stage_record(out, name), {"key": key})  # an interrupted stage with this key resumes
    STAGE_STATUS[name] = "run"
    build()
    return False


def file_digest(path: Path) -> str:
    return hashlib.sha256(content_bytes(path)).hexdigest()[:16]


def content_bytes(path: Path) -> bytes:
    """What a cache key hashes of a file: its bytes, or for a Python file its syntax tree without docstrings
    (comments and layout are never in it), so that an edit to a module's prose keeps the shared cache's keys
    while any edit to what it computes changes them."""
    data = path.read_bytes()
    if path.suffix != ".py":
        return data
    tree = ast.parse(data, filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False).encode()


def recipe_files(recipe: Path) -> list[Path]:
    """The files a recipe is made of: itself, then the bases it includes."""
    from core.recipe_file import load_recipe_file

    return load_recipe_file(recipe).files


def recipe_digest(recipe: Path) -> str:
    """A stage key's hash of a recipe: its file's, or with included bases, of every file it is made of."""
    files = recipe_files(recipe)
    return file_digest(recipe) if len(files) == 1 else warmstart_key(*files)


def warmstart_key(*files: Path) -> str:
    """A short hash of the files that determine the warm-started base model (Python files by
    :func:`content_bytes`: their code, not their prose)."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(content_bytes(file))
    return digest.hexdigest()[:16]


def demo_paths(out: Path) -> dict[str, Path]:
    """Where the demo's stages write under ``out``."""
    return {
        "model": out / "tiny-qwen3vl",
        "clip": out / "tiny-clip",
        "world": out / "world",
        "base": out / "base",
        "oric_train": out / "oric" / "oric_train.json",
        "oric_bench": out / "oric-bench" / "oric_bench.json",
        "oric_dev": out / "oric-dev" / "oric_bench.json",
        "run": out / "grpo",
        "finer": out / "finer",
        "finer_bench": out / "finer-bench" / "finer_bench.csv",
        "finer_yn": out / "finer-bench" / "finer_yn.csv",
        "dpo": out / "dpo",
    }


def build_world(paths: dict[str, Path], seed: int) -> None:
    """The synthetic world with scene priors (both splits)."""
    world = paths["world"]
    sizes = ["--train-images", str(TRAIN_IMAGES), "--val-images", str(VAL_IMAGES), "--dev-images", str(DEV_IMAGES)]
    run_stage(
        _out(paths),
        "world",
        world_key(seed),
        [world],
        lambda: (world / "dev" / "coco_pope_random.json").is_file(),
        lambda: run_veritune("build", "synthetic-world", "--out", str(world), *sizes, "--seed", str(seed)),
    )


def _out(paths: dict[str, Path]) -> Path:
    """The demo directory ``paths`` (:func:`demo_paths`) lie in."""
    return paths["world"].parent


def world_key(seed: int) -> str:
    return stage_key("world", TRAIN_IMAGES, VAL_IMAGES, DEV_IMAGES, seed)


def build_tiny_models(paths: dict[str, Path], seed: int) -> None:
    """The random-initialised demo-size Qwen3-VL and the tiny CLIP trained on the train split."""
    build_tiny_qwen(paths, seed)
    print_stage_line(_build_tiny_clip(paths, seed))


def build_tiny_qwen(paths: dict[str, Path], seed: int) -> None:
    from miniature.tiny.models import IDENTITY_FILE, build_tiny_model

    # the "demo" size: wider than the tests' model, which does not learn to use the image
    # (docs/LAB_NOTEBOOK_ARCHIVE.md#diagnosis)
    run_stage(
        _out(paths),
        "tiny-qwen3vl",
        stage_key("tiny-qwen3vl", seed, "demo", 0),
        [paths["model"]],
        (paths["model"] / IDENTITY_FILE).is_file,  # written last: the weights and the processor are there
        lambda: build_tiny_model("qwen3vl", paths["model"], seed=seed, format_warmup_steps=0, size="demo"),
    )
    print(f"tiny Qwen3-VL: {paths['model']}", flush=True)


def _build_tiny_clip(paths: dict[str, Path], seed: int) -> str:
    """The tiny CLIP, trained contrastively on the train split (one torch thread: ``pin_threads``)."""
    from miniature.tiny.clip import TRAINED_FILE, build_tiny_clip, train_tiny_clip, write_trained_record

    world = paths["world"]

    def build() -> None:
        build_tiny_clip(paths["clip"], seed=seed)
        stats = train_tiny_clip(
            paths["clip"], world / "train" / "instances.json", world / "train" / "images", seed=seed
        )
        write_trained_record(paths["clip"], stats)

    key = stage_key("tiny-clip", seed, recorded_key(_out(paths), "world"))
    run_stage(_out(paths), "tiny-clip", key, [paths["clip"]], (paths["clip"] / TRAINED_FILE).is_file, build)
    return f"tiny CLIP: {paths['clip']} ({(paths['clip'] / TRAINED_FILE).read_text().strip()})"


def build_data(paths: dict[str, Path], out: Path, seed: int, finer: bool = True) -> None:
    """What needs neither the base model nor a trained one: the tiny CLIP, ORIC's data, FINER's data (unless
    ``finer`` is False)."""
    print_stage_line(_build_tiny_clip(paths, seed))
    build_oric(paths, out, seed)
    if finer:
        build_finer(paths, seed)


def print_stage_line(message: str) -> None:
    """A line for the terminal, or for the stage log of a background stage."""
    log = getattr(_OUTPUT, "log", None)
    if log is None:
        print(message, flush=True)
    else:
        with log.open("a") as stream:
            stream.write(message + "\n")


def warm_start(paths: dict[str, Path], out: Path, seed: int, use_cache: bool, overrides: tuple[str, ...] = ()) -> None:
    """The base model: the SFT warm-start on the table of ``veritune build warmstart-data`` (stage
    ``warmstart-data``), reused from the shared cache when its inputs are unchanged (two
    demos building the same entry at once both succeed: :func:`core.cache.publish_dir`; ``overrides``:
    further recipe keys, e.g. ``--max_steps 2`` for a smoke test; part of the cache key)."""
    world = paths["world"]
    # the table first (its images named relative to the image root: the same bytes in any demo directory)
    table, generator = out / "warmstart-data" / "train.jsonl", WARMSTART_GENERATOR
    data = ["build", "warmstart-data", "--annotations", str(world / "train" / "instances.json")]
    data += ["--image-root", str(world / "train" / "images"), "--out", str(table), *WARMSTART_DATA_FLAGS]
    data += ["--seed", str(seed)]
    data_key = stage_key(data, file_digest(generator), recorded_key(out, "world"), out=out)
    run_stage(out, "warmstart-data", data_key, [table.parent], table.is_file, lambda: run_veritune(*data))
    key = warmstart_key(
        *recipe_files(REPO_ROOT / SFT_RECIPE),  # names its accelerate config
        REPO_ROOT / "finetune" / "sft.py",
        REPO_ROOT / "finetune" / "training.py",  # how the recipe's plugins are applied (apply_plugins)
        REPO_ROOT / "miniature" / "cpu_speed.py",  # what they do (the LM head's labelled positions, foreach AdamW)
        REPO_ROOT / "core" / "trl_adapter.py",  # the TRL names they touch
        table,
        generator,
        paths["model"] / "model.safetensors",
    )
    key = stage_key("warm-start", key, seed)  # the seed changes the run too
    if overrides:
        key = hashlib.sha256(f"{key} {' '.join(overrides)}".encode()).hexdigest()[:16]
    cached = CACHE / "warmstart" / key

    def build() -> None:
        if use_cache and (cached / "model.safetensors").is_file():
            print(f"reusing the cached warm-start {cached}")
            STAGE_STATUS["base"] = "shared cache"
        else:
            launch(
                "finetune/sft.py",
                SFT_RECIPE,
                [
                    "--model_name_or_path",
                    str(paths["model"]),
                    "--dataset_path",
                    str(table),
                    "--image_root",
                    str(world / "train" / "images"),
                    "--output_dir",
                    str(out / "sft"),
                    "--seed",
                    str(seed),
                    *overrides,
                ],
            )
            if use_cache and not publish_dir(out / "sft", cached):
                print(f"another process cached this warm-start first: using {cached}")
        copy_dir(cached if use_cache else out / "sft", paths["base"])

    # out/sft, the warm-start's run directory, goes with a base of other inputs (it would refuse their settings)
    outputs = [paths["base"], out / "sft"]
    run_stage(out, "base", key, outputs, lambda: (paths["base"] / "model.safetensors").is_file(), build)


def build_oric(paths: dict[str, Path], out: Path, seed: int, dev: bool = False) -> None:
    """ORIC training data (train images), ORIC-Bench (val images) and the leakage check between them; with
    ``dev``, also ORIC-Bench's questions on the dev split (``veritune demo-select``), checked the same way."""
    world = paths["world"]
    # the co-occurrence judge picks the hard present objects, the trained CLIP the plausible absent ones
    common = "--context-judge cooccurrence --context-judge-threshold 0.5 --yes-per-image 1 --no-per-image 1".split()
    common += ["--clip-model", str(paths["clip"]), "--clip-cache", str(out / "cache" / "clip"), "--seed", str(seed)]
    builds = [  # (builder, split, output, questions per answer, further arguments)
        (
            "oric",
            "train",
            paths["oric_train"],
            ORIC_TRAIN_PER_ANSWER,
            ["--review-html", str(out / "oric" / "review.html")],
        ),
        ("oric-bench", "val", paths["oric_bench"], ORIC_BENCH_PER_ANSWER, []),
    ]
    if dev:
        builds.append(("oric-bench", "dev", paths["oric_dev"], ORIC_BENCH_PER_ANSWER, []))
    upstream = [recorded_key(out, "world"), recorded_key(out, "tiny-clip")]
    for builder, split, output, per_answer, further in builds:
        data = ["--annotations", str(world / split / "instances.json"), "--image-root", str(world / split / "images")]
        counts = ["--num-yes", str(per_answer), "--num-no", str(per_answer)]
        command = ["build", builder, *data, "--out", str(output), *counts, *further, *common]
        run_stage(
            out,
            output.parent.name,  # oric, oric-bench, oric-dev: one folder each
            stage_key(command, upstream, out=out),
            [output.parent],
            output.is_file,
            lambda command=command: run_veritune(*command),
        )
    for bench in builds[1:]:
        run_veritune("build", "check-leakage", str(paths["oric_train"]), str(bench[2]))


def train_grpo(
    paths: dict[str, Path],
    steps: int | None,
    seed: int,
    *,
    split: str = "val",
    run: Path | None = None,
    extra: tuple[str, ...] = (),
) -> Path:
    """GRPO from the base model, with the eval hook at step 0 and at every save on ORIC-Bench and the
    POPE-random-style questions of ``split`` (``val``: the benchmarks; ``dev``: hyperparameter selection).
    ``extra`` overrides further recipe keys. Returns the run directory."""
    world = paths["world"]
    run = run or paths["run"]
    bench = paths["oric_bench"] if split == "val" else paths["oric_dev"]
    overrides = [
        "--model_name_or_path",
        str(paths["base"]),
        "--dataset_path",
        str(paths["oric_train"]),
        "--image_root",
        str(world / "train" / "images"),
        "--replay_path",  # conventional questions replayed beside ORIC's (the recipe's replay_ratio)
        str(world / "train" / "coco_pope_random.json"),
        "--output_dir",
        str(run),
        "--resume_from_checkpoint",
        "auto",
        "--seed",
        str(seed),
        # the eval hook: the base model before the first step (step 0) and every save, on the same items
        "--eval_on_save",
        "true",
        "--eval_at_start",
        "true",
        "--eval_benchmarks",
        "oric_bench",
        "pope",
        "--eval_data",
        f"oric_bench={bench}",
        f"pope={world / split / 'coco_pope_random.json'}",
        "--eval_image_root",
        str(world / split / "images"),
        *extra,
    ]
    if steps is not None:
        overrides += ["--max_steps", str(steps), "--save_steps", str(steps)]
    out = _out(paths)
    key = stage_key(
        "grpo",
        overrides,
        recipe_digest(REPO_ROOT / RECIPE),
        [recorded_key(out, name) for name in ("world", "base", "oric", "oric-bench" if split == "val" else "oric-dev")],
        out=out,
    )
    run_stage(
        out,
        run.name,
        key,
        [run],
        lambda: (run / "trainer_state.json").is_file(),
        lambda: launch("finetune/grpo.py", RECIPE, overrides),
    )
    return run


def build_finer(paths: dict[str, Path], seed: int) -> None:
    """FINER-Tuning tuples (train scene graphs), FINER-bench and its yes/no probe (val scene graphs)."""
    world, out = paths["world"], _out(paths)
    upstream = recorded_key(out, "world")
    tuples = ["build", "finer", "--scene-graphs", str(world / "train" / "scene_graphs.json")]
    tuples += ["--image-root", str(world / "train" / "images"), "--out", str(paths["finer"]), "--seed", str(seed)]
    run_stage(
        out,
        "finer",
        stage_key(tuples, upstream, out=out),
        [paths["finer"]],
        (paths["finer"] / "train.jsonl").is_file,
        lambda: run_veritune(*tuples),
    )
    # FINER-bench (the letter protocol) and its yes/no probe: the same val graphs, two protocols, one folder
    benches = [
        [
            "build",
            "finer-bench",
            *protocol,
            "--scene-graphs",
            str(world / "val" / "scene_graphs.json"),
            "--image-root",
            str(world / "val" / "images"),
            "--out",
            str(bench),
            "--seed",
            str(seed),
        ]
        for bench, protocol in ((paths["finer_bench"], []), (paths["finer_yn"], ["--protocol", "yn"]))
    ]

    def build_benches() -> None:
        for command, bench in zip(benches, (paths["finer_bench"], paths["finer_yn"]), strict=True):
            if not bench.is_file():
                run_veritune(*command)

    run_stage(
        out,
        paths["finer_bench"].parent.name,
        stage_key(benches, upstream, out=out),
        [paths["finer_bench"].parent],
        lambda: paths["finer_bench"].is_file() and paths["finer_yn"].is_file(),
        build_benches,
    )


def train_dpo(paths: dict[str, Path], seed: int, report: bool = False) -> None:
    """DPO from the base model on the FINER-Tuning tuples (built first if missing); with ``report``, then the
    run's HTML report."""
    world, out = paths["world"], _out(paths)
    build_finer(paths, seed)
    overrides = [
        "--model_name_or_path",
        str(paths["base"]),
        "--dataset_path",
        str(paths["finer"]),
        "--image_root",
        str(world / "train" / "images"),
        "--output_dir",
        str(paths["dpo"]),
        "--seed",
        str(seed),
        "--report_to",
        "none",
        "--eval_on_save",
        "true",
        "--eval_at_start",
        "true",
        "--eval_benchmarks",
        f"finer:{FINER_QUESTIONS}",
        "finer_yn",
        "--eval_data",
        f"finer={paths['finer_bench']}",
        f"finer_yn={paths['finer_yn']}",
        "--eval_image_root",
        str(world / "val" / "images"),
        "--max_steps",
        str(DPO_STEPS),
        "--save_steps",
        str(DPO_STEPS),
    ]
    key = stage_key(
        "dpo",
        overrides,
        recipe_digest(REPO_ROOT / DPO_RECIPE),
        [recorded_key(out, name) for name in ("world", "base", "finer", "finer-bench")],
        out=out,
    )
    run_stage(
        out,
        "dpo",
        key,
        [paths["dpo"]],
        lambda: (paths["dpo"] / "trainer_state.json").is_file(),
        lambda: launch("finetune/dpo.py", DPO_RECIPE, overrides),
    )
    if report:
        run_command(report_command(paths["dpo"]))


def report_command(run: Path) -> list[str]:
    """``veritune report RUN``: the run's HTML report (step-0 baseline, every checkpoint, sample rows)."""
    return [sys.executable, "-m", "veritune.cli", "report", str(run)]


def table_source(entry: tuple[str, ...]) -> str:
    """The run a :func:`results_table` entry is read from: its third field, else ``"dpo"`` for FINER's benchmarks
    and ``"grpo"`` for the others."""
    return entry[2] if len(entry) > 2 else "dpo" if entry[0].startswith("finer") else "grpo"


def results_table(
    runs: dict[str, Path], table: list[tuple[str, str]] | list[tuple[str, str, str]] = TABLE
) -> list[dict[str, Any]]:
    """The before/after rows from the eval hooks of the GRPO run (ORIC-Bench, POPE) and the DPO run (FINER):
    step 0 (the base model) against the last checkpoint, each with its 95% paired bootstrap interval
    (questions resampled), on exactly the items the hooks evaluated: the run report's own computation
    (:func:`eval_hooks.bootstrap.hook_difference_intervals`, same resamples and seed). An entry of ``table`` is
    ``(benchmark, metric)``, read from ``runs["dpo"]`` for FINER's benchmarks and ``runs["grpo"]`` otherwise, or
    ``(benchmark, metric, run)``, read from ``runs[run]`` and labelled with the run's name."""
    from core.run_layout import collect_eval
    from eval_hooks.bootstrap import hook_difference_intervals

    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    # one set of draws per run and benchmark, its metrics together
    for trained_by, benchmark in dict.fromkeys((table_source(entry), entry[0]) for entry in table):
        run_dir = runs[trained_by]
        by_step = collect_eval(run_dir).get(benchmark, {})
        if 0 not in by_step or len(by_step) < 2:
            raise UserError(
                f"{run_dir}: no step-0 and final {benchmark} results from the eval hook (see the training log)"
            )
        last = max(by_step)
        metrics = [entry[1] for entry in table if entry[0] == benchmark and table_source(entry) == trained_by]
        for row in hook_difference_intervals(run_dir, benchmark, metrics, (0, last))[2]:
            found[(trained_by, benchmark, row["metric"])] = {
                "benchmark": benchmark,
                "trained_by": trained_by,
                "step": last,
                **row,
            }
    rows = []
    for entry in table:
        row = found[(table_source(entry), entry[0], entry[1])]
        if len(entry) > 2:
            row["label"] = f"{entry[0]} {entry[1]} ({entry[2]})"
        rows.append(row)
    return rows


def summarise(
    paths: dict[str, Path],
    rows: list[dict[str, Any]],
    timings: dict[str, float],
    out: Path,
    runs: dict[str, Path],
    probe: Path,
) -> None:
    from core.io import atomic_write_json, atomic_write_text
    from eval_hooks.bootstrap import format_table

    state = json.loads((paths["run"] / "trainer_state.json").read_text())
    rewards = [row["reward"] for row in state["log_history"] if "reward" in row]
    stds = [row["reward_std"] for row in state["log_history"] if "reward_std" in row]
    table = format_table(rows)
    stages = dict(STAGE_STATUS)
    atomic_write_json(out / "results.json", {"rows": rows, "timings_s": timings, "stages": stages})
    atomic_write_text(out / "results.txt", table + "\n")
    print("\n==> done")
    print(f"stage times (s):   {json.dumps(timings)}")
    print(f"stages:            {stage_summary(stages)}")
    if rewards:
        head, tail = rewards[: max(1, len(rewards) // 4)], rewards[-max(1, len(rewards) // 4) :]
        print(
            f"GRPO reward:       {sum(head) / len(head):.2f} in the first steps -> "
            f"{sum(tail) / len(tail):.2f} in the last "
            f"(mean reward std within groups {sum(stds) / max(len(stds), 1):.2f})"
        )
    print(
        f"reports:           {', '.join(str(run / 'report.html') for run in runs.values())} "
        "(step-0 baseline and every checkpoint)"
    )
    print(f"results:           {out / 'results.json'}\n")
    if "dpo" in runs:
        print(
            "ORIC half, rows oric_bench and pope: base vs GRPO. FINER half on the demo's base, which cannot see "
            "per-instance attributes (--finer tuples), rows finer and finer_yn: base vs DPO on FINER-Tuning's tuples. "
            "Each with the 95% paired bootstrap interval of the difference."
        )
    else:
        print(
            "ORIC half, rows oric_bench and pope: the demo's base vs GRPO on ORIC's questions (the demo world's val "
            "split). FINER half, rows marked (finer-seeing): the base that sees per-instance attributes vs its DPO "
            "on image-contrast pairs (its drawn world's val split; its pope row: the objects kept). Each with the 95% "
            "paired bootstrap interval of the difference."
        )
    print(table)
    levels = _finer_yn_levels(probe)
    if levels:
        print(
            f"finer_yn: the probe's levels here are {', '.join(f'L{level}' for level in levels)} (the others cannot be "
            "filled from this world's scene graphs; docs/EVALUATION.md, FINER's yes/no probe)"
        )


def stage_summary(stages: dict[str, str]) -> str:
    """``"run now: grpo; reused (same inputs as before): world, ...; from the shared cache: base"``."""
    groups = [
        ("run now", "run"),
        ("reused (same inputs as before)", "reused"),
        ("from the shared cache", "shared cache"),
    ]
    parts = [
        f"{label}: {', '.join(name for name, status in stages.items() if status == wanted)}"
        for label, wanted in groups
        if wanted in stages.values()
    ]
    return "; ".join(parts)


def _finer_yn_levels(bench: Path) -> list[int]:
    """The levels the yes/no probe at ``bench`` holds (none when it was not built)."""
    import csv

    if not bench.is_file():
        return []
    with bench.open(newline="") as handle:
        return sorted({int(row["level"]) for row in csv.DictReader(handle)})
