"""``veritune demo --finer seeing``: the demo's FINER half on a tiny base that sees per-instance attributes.

The default FINER half (``miniature.stages.train_dpo``) trains DPO on FINER-Tuning's tuples from the demo's base,
which sees each 64-pixel image as four vision tokens and cannot tell one object's border or pattern from
another's, so DPO has nothing to cure there. This half runs the path each of whose settings was chosen on the dev
split of three seeds (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base, docs/LAB_NOTEBOOK.md#dpo-round-16), stage by stage:

1. two drawn worlds (``veritune build synthetic-world --instance-attributes drawn``): a fresh one of 12,000 train
   images for the warm-start (each image seen about 16 times in 6,000 steps of 32), and one of the demo's sizes
   whose train scene graphs give the DPO pairs and whose val split gives the probe and POPE;
2. a tiny Qwen3-VL with 16 vision tokens per image (``veritune tiny-model --patch-size 8``) whose vision tower is
   pretrained on the fresh world's per-instance attributes (``--pretrain-vision``, ``miniature.tiny.tower``);
3. the base: ``finetune/sft.py`` with ``recipes/miniature/tiny_sft_attributes.yaml`` (the tower frozen, three pairs
   of each drawn attribute per image in the probe's wording, 6,000 steps) on the fresh world's table (``veritune
   build warmstart-data``);
4. DPO pairs that ask one description on an image where it is true and on one where it is false (``veritune
   build finer-contrast --false-image random``), and FINER's yes/no probe on the val scene graphs (``veritune
   build finer-bench --protocol yn``; the FINER paper, arXiv 2603.17662, Sec. 1, Fig. 1), built beside stages 2-3
   (they need only the demo-size world), as the warm-start's table is beside the tower's pretraining;
5. DPO (``finetune/dpo.py``, ``recipes/miniature/tiny_finer_contrast.yaml`` at 6,400 steps and learning rate 2.5e-4:
   the steps the demo's time allows, at the rate chosen on the dev split of every seed),
   whose eval hook scores the probe and POPE on the val split before the first step and after the last.

``veritune demo`` runs this half by default, beside the ORIC half; its DPO runs the frozen reference model in its data
loader's worker (the ``miniature.cpu_speed.reference_in_workers`` plugin), on the core the ORIC half leaves. Its
base (stages 1-3) is cached like the ORIC warm-start (``CACHE/seeing-base/KEY``). The stages are keyed like the demo's
(``miniature.stages.run_stage``), so an interrupted run resumes and a rerun reuses what is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from miniature.stages import (
    DEV_IMAGES,
    REPO_ROOT,
    STAGE_STATUS,
    TRAIN_IMAGES,
    VAL_IMAGES,
    copy_dir,
    launch,
    print_stage_line,
    recipe_digest,
    recorded_key,
    report_command,
    run_command,
    run_stage,
    run_veritune,
    stage_key,
    start_in_thread,
    warmstart_key,
)

SFT_RECIPE = "recipes/miniature/tiny_sft_attributes.yaml"
DPO_RECIPE = "recipes/miniature/tiny_finer_contrast.yaml"
# The fresh world of seed S is drawn with seed 100 + S, apart from the demo-size world of seed S, so the warm-start
# never sees the images of the DPO pairs or of the probe (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base)
FRESH_SEED_OFFSET = 100
RUN = "finer-seeing"  # the DPO run's name in the before/after table
# The before/after rows of this half: the DPO bound reads the L3-L7 pairs (both twins right), the
# positives (an "always no" drift shows there) and POPE (the objects kept)
TABLE = [
    ("finer_yn", "paired_accuracy_l3_l7", RUN),
    ("finer_yn", "pos_accuracy", RUN),
    ("finer_yn", "neg_accuracy_l3_l7", RUN),
    ("pope", "accuracy", RUN),
]


# The code the seeing base is made by (its shared-cache key, with the commands, the recipe and the libraries'
# versions): the drawn worlds, the tiny model and its tower's pretraining, and the warm-start's trainer
BASE_CODE = (
    "miniature/warmstart_data.py",
    "core",
    "finetune",
    "miniature/tiny",
    "miniature/world.py",
    "miniature/scene_graphs.py",
    "veritune/world_cli.py",
    "veritune/tiny_cli.py",
)
BASE_LIBRARIES = ("torch", "transformers", "trl", "accelerate", "numpy", "pillow")


def base_code_digest() -> str:
    """A short hash of :data:`BASE_CODE`'s Python files and :data:`BASE_LIBRARIES`' versions."""
    from importlib.metadata import version

    files = []
    for name in BASE_CODE:
        path = REPO_ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return stage_key(warmstart_key(*files), [(library, version(library)) for library in BASE_LIBRARIES])


@dataclass(frozen=True)
class FinerHalfSizes:
    """The demo's sizes: 6,000 warm-start steps, 6,400 DPO steps at lr 2.5e-4 (docs/LAB_NOTEBOOK.md#dpo-round-16);
    tests pass smaller ones."""

    fresh_images: int = 12000
    world_images: tuple[int, int, int] = (TRAIN_IMAGES, VAL_IMAGES, DEV_IMAGES)  # train, val, dev: the demo's
    tower_steps: int = 1000
    warmstart_steps: int = 6000
    dpo_steps: int = 6400
    dpo_learning_rate: float = 2.5e-4
    eval_limit: int | None = None  # every probe pair and POPE question of the val split


def finer_half_paths(out: Path) -> dict[str, Path]:
    """Where this half writes under the demo's ``out``."""
    root = out / RUN
    return {
        "fresh": root / "fresh",
        "world": root / "world",
        "model": root / "tiny-qwen3vl",
        "base": root / "base",
        "data": root / "warmstart-data" / "train.jsonl",
        "pairs": root / "contrast",
        "probe": root / "finer-bench" / "finer_yn.csv",
        "dpo": root / "dpo",
    }


def run_finer_half(
    out: Path,
    seed: int = 0,
    sizes: FinerHalfSizes = FinerHalfSizes(),
    report: bool = True,
    use_cache: bool = True,
) -> Path:
    """Every stage of this half under ``out`` (the demo's directory); returns the DPO run, whose eval hook holds
    the step-0 and final scores. With ``report``, then the run's HTML report. With ``use_cache``, the base (its
    worlds, its pretrained tower and its warm-start: most of this half's time) comes from the shared cache when the same
    commands, code and libraries made it before (``CACHE/seeing-base/KEY``), like the ORIC half's warm-start."""
    from core.cache import publish_dir
    from core.run_layout import TRAINER_STATE_FILE
    from miniature import stages

    paths = finer_half_paths(out)
    fresh, world = paths["fresh"], paths["world"]

    def command_stage(name: str, command: list[str], upstream: list[str], output: Path, done: Path) -> None:
        """A stage that is one ``veritune`` command, keyed by it and by the stages it reads."""
        key = stage_key(command, *(recorded_key(out, stage) for stage in upstream), out=out)
        run_stage(out, name, key, [output], done.is_file, lambda: run_veritune(*command))

    def world_command(folder: Path, arguments: list[str]) -> list[str]:
        return ["build", "synthetic-world", "--out", str(folder), *arguments, "--instance-attributes", "drawn"]

    fresh_world = world_command(
        fresh,
        ["--train-images", str(sizes.fresh_images), "--val-images", "10", "--dev-images", "10"]
        + ["--seed", str(FRESH_SEED_OFFSET + seed)],
    )
    demo_world = world_command(
        world,
        [f"--{split}-images={count}" for split, count in zip(("train", "val", "dev"), sizes.world_images, strict=True)]
        + ["--seed", str(seed)],
    )
    model = ["tiny-model", "--size", "demo", "--format-warmup-steps", "0", "--patch-size", "8", "--seed", str(seed)]
    model += ["--pretrain-vision", str(fresh / "train"), "--pretrain-vision-steps", str(sizes.tower_steps)]
    model += ["--pretrain-vision-eval", str(world / "dev"), "--out", str(paths["model"])]
    # the recipe's table: the demo's conventional questions and 3 attribute pairs per image and slot (the scene
    # graphs beside the instances file)
    data = ["build", "warmstart-data", "--annotations", str(fresh / "train" / "instances.json")]
    data += ["--image-root", str(fresh / "train" / "images"), "--out", str(paths["data"])]
    data += ["--questions-per-image", "2", "--no-captions", "--answer-styles", "plain"]
    data += ["--attribute-pairs-per-image", "3", "--seed", str(seed)]
    warmstart = ["--model_name_or_path", str(paths["model"]), "--output_dir", str(paths["base"])]
    warmstart += ["--dataset_path", str(paths["data"])]
    warmstart += ["--image_root", str(fresh / "train" / "images"), "--seed", str(seed)]
    warmstart += ["--max_steps", str(sizes.warmstart_steps)]

    command_stage("seeing-world", demo_world, [], world, world / "dev" / "coco_pope_random.json")

    # The base is keyed by the commands that make it (paths relative to ``out``), its recipe, its code and the
    # libraries' versions: the same key from the cache or built here, so the stages after it do not tell them apart
    base_key = stage_key(
        "seeing-base",
        [fresh_world, demo_world, model, data, warmstart],
        recipe_digest(REPO_ROOT / SFT_RECIPE),
        base_code_digest(),
        out=out,
    )
    cached = stages.CACHE / "seeing-base" / base_key

    def build_base() -> None:
        if use_cache and (cached / "model.safetensors").is_file():
            print_stage_line(f"reusing the cached base that sees {cached}")
            STAGE_STATUS["seeing-base"] = "shared cache"
            copy_dir(cached, paths["base"])
            return
        command_stage("seeing-fresh", fresh_world, [], fresh, fresh / "dev" / "coco_pope_random.json")
        # the warm-start's table needs only the fresh world: built beside the tower's pretraining
        table = start_in_thread(
            lambda: command_stage("seeing-data", data, ["seeing-fresh"], paths["data"].parent, paths["data"])
        )
        weights = paths["model"] / "model.safetensors"
        try:
            command_stage("seeing-model", model, ["seeing-fresh", "seeing-world"], paths["model"], weights)
        finally:
            table()
        # one thread throughout: with its data worker beside it, a second thread makes a warm-start step no cheaper
        # on a 2-core CPU (docs/LAB_NOTEBOOK.md#both-halves)
        launch("finetune/sft.py", SFT_RECIPE, warmstart)
        if use_cache and not publish_dir(paths["base"], cached):
            print_stage_line(f"another process cached this base first: {cached}")

    pairs = ["build", "finer-contrast", "--false-image", "random", "--seed", str(seed)]
    pairs += ["--scene-graphs", str(world / "train" / "scene_graphs.json")]
    pairs += ["--image-root", str(world / "train" / "images"), "--out", str(paths["pairs"])]
    probe = ["build", "finer-bench", "--protocol", "yn", "--seed", str(seed)]
    probe += ["--scene-graphs", str(world / "val" / "scene_graphs.json")]
    probe += ["--image-root", str(world / "val" / "images"), "--out", str(paths["probe"])]

    def build_pairs_and_probe() -> None:
        command_stage("seeing-pairs", pairs, ["seeing-world"], paths["pairs"], paths["pairs"] / "manifest.json")
        command_stage("seeing-probe", probe, ["seeing-world"], paths["probe"].parent, paths["probe"])

    # DPO's pairs and probe need only the demo-size world: built beside the base, off the chain's critical path
    pairs_and_probe = start_in_thread(build_pairs_and_probe)
    base_done = (paths["base"] / TRAINER_STATE_FILE).is_file  # the warm-start saves it after its weights
    try:
        run_stage(out, "seeing-base", base_key, [paths["base"]], base_done, build_base)
    finally:
        pairs_and_probe()

    dpo = ["--model_name_or_path", str(paths["base"]), "--output_dir", str(paths["dpo"])]
    dpo += ["--dataset_path", str(paths["pairs"]), "--image_root", str(world / "train" / "images")]
    dpo += ["--seed", str(seed), "--max_steps", str(sizes.dpo_steps)]
    dpo += ["--learning_rate", str(sizes.dpo_learning_rate)]
    dpo += ["--save_strategy", "steps", "--save_steps", str(sizes.dpo_steps)]
    dpo += ["--eval_at_start", "true", "--eval_on_save", "true", "--eval_benchmarks", "finer_yn", "pope"]
    dpo += ["--eval_data", f"finer_yn={paths['probe']}", f"pope={world / 'val' / 'coco_pope_random.json'}"]
    dpo += ["--eval_image_root", str(world / "val" / "images"), "--eval_batch_size", "32"]
    if sizes.eval_limit is not None:  # a stratified sample, said so in the hook's results
        dpo += ["--eval_limit", str(sizes.eval_limit)]
    upstream = [recorded_key(out, name) for name in ("seeing-world", "seeing-base", "seeing-pairs", "seeing-probe")]
    run_stage(
        out,
        "seeing-dpo",
        stage_key(dpo, recipe_digest(REPO_ROOT / DPO_RECIPE), upstream, out=out),
        [paths["dpo"]],
        lambda: (paths["dpo"] / "trainer_state.json").is_file(),
        lambda: launch("finetune/dpo.py", DPO_RECIPE, dpo),
    )
    if report:
        run_command(report_command(paths["dpo"]))
    return paths["dpo"]
