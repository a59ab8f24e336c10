"""The demo's stages are keyed by what makes their output (a rerun with other arguments reruns what changed and
says what it reused), and the shared cache takes any number of writers of one entry at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
from pathlib import Path

import pytest

from core.cache import publish_dir, remove_stale_temporaries
from miniature import stages as demo


@pytest.fixture()
def stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The demo's paths under ``tmp_path``, with its commands recorded instead of run (each writes what the
    real command's completion is recognised by)."""
    paths = demo.demo_paths(tmp_path / "demo")
    launched: list[list[str]] = []

    def launch(script: str, recipe: str, overrides: list[str]) -> None:
        launched.append([script, *overrides])
        run = Path(overrides[overrides.index("--output_dir") + 1])
        run.mkdir(parents=True, exist_ok=True)
        steps = overrides[overrides.index("--max_steps") + 1] if "--max_steps" in overrides else "recipe"
        (run / "trainer_state.json").write_text(json.dumps({"steps": steps}))
        (run / "model.safetensors").write_text(f"trained by {script} {steps}")

    def veritune(*args: str) -> None:
        launched.append(list(args))
        if args[:2] == ("build", "synthetic-world"):
            world = Path(args[args.index("--out") + 1])
            for split in ("train", "val", "dev"):
                (world / split).mkdir(parents=True)
                (world / split / "coco_pope_random.json").write_text("[]")
                (world / split / "instances.json").write_text(json.dumps({"seed": args[-1]}))
        elif "--out" in args:
            out = Path(args[args.index("--out") + 1])
            if out.suffix:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text("built")
            else:
                out.mkdir(parents=True)
                (out / "train.jsonl").write_text("built")

    def model(kind: str, out: Path, **kwargs: object) -> None:
        launched.append(["tiny-model", kind])
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "model.safetensors").write_text(f"tiny {kwargs}")
        (Path(out) / "veritune_tiny.json").write_text(json.dumps({"family": kind}))  # written last

    def clip(out: Path, **kwargs: object) -> None:
        launched.append(["tiny-clip"])
        Path(out).mkdir(parents=True)

    monkeypatch.setattr("miniature.tiny.models.build_tiny_model", model)
    monkeypatch.setattr("miniature.tiny.clip.build_tiny_clip", clip)
    monkeypatch.setattr("miniature.tiny.clip.train_tiny_clip", lambda *args, **kwargs: {"trained": True})
    monkeypatch.setattr(demo, "CACHE", paths["world"].parent.parent / "cache")

    monkeypatch.setattr(demo, "launch", launch)
    monkeypatch.setattr(demo, "run_veritune", veritune)
    demo.STAGE_STATUS.clear()
    return {"paths": paths, "launched": launched}


def test_a_rerun_with_other_steps_reruns_grpo_and_says_what_it_reused(stages: dict) -> None:
    paths, launched = stages["paths"], stages["launched"]
    demo.build_world(paths, seed=0)
    demo.train_grpo(paths, 60, seed=0)
    assert [command[0] for command in launched] == ["build", "finetune/grpo.py"]
    assert json.loads((paths["run"] / "trainer_state.json").read_text())["steps"] == "60"

    launched.clear()
    demo.STAGE_STATUS.clear()
    demo.build_world(paths, seed=0)
    demo.train_grpo(paths, 60, seed=0)  # the same arguments: nothing runs again
    assert launched == []
    assert demo.stage_summary(demo.STAGE_STATUS) == "reused (same inputs as before): world, grpo"

    (paths["run"] / "checkpoint-60").mkdir()  # the 60-step run's outputs must not survive into the 30-step one
    demo.STAGE_STATUS.clear()
    demo.build_world(paths, seed=0)
    demo.train_grpo(paths, 30, seed=0)
    assert [command[0] for command in launched] == ["finetune/grpo.py"]
    assert launched[0][launched[0].index("--max_steps") + 1] == "30"
    assert json.loads((paths["run"] / "trainer_state.json").read_text())["steps"] == "30"
    assert not (paths["run"] / "checkpoint-60").exists()
    assert demo.stage_summary(demo.STAGE_STATUS) == "run now: grpo; reused (same inputs as before): world"


def test_the_tiny_model_is_built_again_when_killed_before_its_identity_file(stages: dict) -> None:
    """The weights come first, the processor and ``veritune_tiny.json`` after them: a folder without the identity
    file is a build that was killed, not a model to reuse."""
    paths, launched = stages["paths"], stages["launched"]
    demo.build_tiny_qwen(paths, seed=0)
    (paths["model"] / "veritune_tiny.json").unlink()  # killed after save_pretrained of the weights
    launched.clear()
    demo.STAGE_STATUS.clear()
    demo.build_tiny_qwen(paths, seed=0)
    assert launched == [["tiny-model", "qwen3vl"]]
    assert demo.STAGE_STATUS["tiny-qwen3vl"] == "run"
    assert (paths["model"] / "veritune_tiny.json").is_file()
    launched.clear()
    demo.build_tiny_qwen(paths, seed=0)  # complete now: reused
    assert launched == []


def every_stage(paths: dict, steps: int, seed: int = 0) -> None:
    """The demo's stages in its order (the threads aside), as ``run_demo`` and ``demo-select`` call them."""
    out = paths["world"].parent
    demo.build_world(paths, seed)
    demo.build_tiny_models(paths, seed)
    demo.warm_start(paths, out, seed, use_cache=True)
    demo.build_oric(paths, out, seed, dev=True)
    demo.build_finer(paths, seed)
    demo.train_dpo(paths, seed)
    demo.train_grpo(paths, steps, seed)


def test_every_stage_is_reused_with_the_same_arguments_and_the_warm_start_comes_from_the_cache(stages: dict) -> None:
    paths, launched = stages["paths"], stages["launched"]
    every_stage(paths, 60)
    built = [command[0] if command[0] != "build" else command[1] for command in launched]
    assert built == [
        "synthetic-world",
        "tiny-model",
        "tiny-clip",
        "warmstart-data",
        "finetune/sft.py",
        "oric",
        "oric-bench",
        "oric-bench",
        "check-leakage",
        "check-leakage",
        "finer",
        "finer-bench",
        "finer-bench",
        "finetune/dpo.py",
        "finetune/grpo.py",
    ]
    assert set(demo.STAGE_STATUS.values()) == {"run"}
    (data,) = [command for command in launched if command[:2] == ["build", "warmstart-data"]]
    table = data[data.index("--out") + 1]
    assert data[data.index("--out") + 2 :] == [*demo.WARMSTART_DATA_FLAGS, "--seed", "0"]
    (sft,) = [command for command in launched if command[0] == "finetune/sft.py"]
    assert sft[sft.index("--dataset_path") + 1] == table  # the warm-start trains on the table

    launched.clear()
    demo.STAGE_STATUS.clear()
    every_stage(paths, 60)
    assert [command[1] for command in launched] == ["check-leakage", "check-leakage"]  # cheap checks, always run
    assert set(demo.STAGE_STATUS.values()) == {"reused"}

    # a fresh demo directory: the warm-start comes from the shared cache, not from training
    fresh = demo.demo_paths(paths["world"].parent.parent / "fresh")
    launched.clear()
    demo.STAGE_STATUS.clear()
    every_stage(fresh, 60)
    assert "finetune/sft.py" not in [command[0] for command in launched]
    assert demo.STAGE_STATUS["base"] == "shared cache"
    assert (fresh["base"] / "model.safetensors").read_text() == (paths["base"] / "model.safetensors").read_text()
    assert "from the shared cache: base" in demo.stage_summary(demo.STAGE_STATUS)


def test_a_copied_or_moved_demo_directory_rerun_with_other_steps_reruns_grpo_only(stages: dict) -> None:
    import shutil

    paths, launched = stages["paths"], stages["launched"]
    every_stage(paths, 60)
    old = paths["world"].parent
    for where, move, steps in (("copied", shutil.copytree, 30), ("moved", shutil.move, 45)):
        new = old.parent / where
        move(old, new)
        launched.clear()
        demo.STAGE_STATUS.clear()
        every_stage(demo.demo_paths(new), steps)
        assert [command[0] for command in launched] == ["build", "build", "finetune/grpo.py"]  # the checks, GRPO
        assert demo.stage_summary(demo.STAGE_STATUS).startswith("run now: grpo; reused (same inputs as before): world")
        assert launched[-1][launched[-1].index("--output_dir") + 1] == str(new / "grpo")
        old = new


def test_the_warm_start_is_keyed_by_its_table_and_the_module_that_generates_it(
    stages: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The shared cache's key reads the table's bytes (not the instances file's) and
    miniature/warmstart_data.py's code: another table, or another generator (which also rebuilds the table), trains
    the base anew; a comment added to the generator does not."""
    paths, launched = stages["paths"], stages["launched"]
    out = paths["world"].parent
    demo.build_world(paths, seed=0)
    demo.build_tiny_qwen(paths, seed=0)

    def warm_start() -> list[str]:
        before = len(launched)
        demo.warm_start(paths, out, 0, use_cache=True)
        return [command[1] if command[0] == "build" else command[0] for command in launched[before:]]

    assert warm_start() == ["warmstart-data", "finetune/sft.py"]
    assert warm_start() == []
    (paths["world"] / "train" / "instances.json").write_text("{}")  # read by the table's build only
    assert warm_start() == []
    (out / "warmstart-data" / "train.jsonl").write_text("another table")
    assert warm_start() == ["finetune/sft.py"]
    generator = tmp_path / "warmstart_data.py"
    generator.write_text(demo.WARMSTART_GENERATOR.read_text() + "# a comment only\n")
    monkeypatch.setattr(demo, "WARMSTART_GENERATOR", generator)
    assert warm_start() == []  # the keys hash the module's code, not its prose
    generator.write_text(demo.WARMSTART_GENERATOR.read_text() + "\nCHANGED = 1\n")
    assert warm_start() == ["warmstart-data", "finetune/sft.py"]


def test_another_seed_reruns_the_world_and_every_stage_built_on_it(stages: dict) -> None:
    paths, launched = stages["paths"], stages["launched"]
    demo.build_world(paths, seed=0)
    demo.train_grpo(paths, 2, seed=0)
    launched.clear()
    demo.build_world(paths, seed=1)
    demo.train_grpo(paths, 2, seed=0)  # its own arguments unchanged, but the world it reads is another
    assert [command[0] for command in launched] == ["build", "finetune/grpo.py"]
    assert launched[0][launched[0].index("--seed") + 1] == "1"


def test_an_interrupted_stage_with_the_same_key_resumes_in_place(stages: dict) -> None:
    paths, launched = stages["paths"], stages["launched"]
    demo.build_world(paths, seed=0)
    demo.train_grpo(paths, 4, seed=0)
    (paths["run"] / "trainer_state.json").unlink()  # killed before its end
    (paths["run"] / "checkpoint-2").mkdir()
    launched.clear()
    demo.train_grpo(paths, 4, seed=0)
    assert [command[0] for command in launched] == ["finetune/grpo.py"]
    assert (paths["run"] / "checkpoint-2").is_dir(), "the checkpoint to resume from was removed"


def test_a_demo_directory_from_an_older_demo_is_rebuilt(stages: dict) -> None:
    paths, launched = stages["paths"], stages["launched"]
    (paths["world"] / "dev").mkdir(parents=True)
    (paths["world"] / "dev" / "coco_pope_random.json").write_text("[]")  # built without a recorded key
    demo.build_world(paths, seed=0)
    assert [command[:2] for command in launched] == [["build", "synthetic-world"]]


# ---------------------------------------------------------------------------------------------- the shared cache


def _build_and_publish(args: tuple[str, str, int]) -> str:
    """One writer: build an entry's content in its own folder, then publish it (each content differs by
    writer, so the entry shows whose copy won)."""
    source, entry, writer = Path(args[0]) / f"writer{args[2]}", Path(args[1]), args[2]
    source.mkdir(parents=True)
    for index in range(20):
        (source / f"part{index}.bin").write_bytes(bytes([writer]) * 200_000)
    (source / "model.safetensors").write_text(f"writer {writer}")
    won = publish_dir(source, entry)
    return f"{writer}:{won}:{(entry / 'model.safetensors').read_text()}"


def test_two_processes_publishing_one_entry_at_once_both_succeed(tmp_path: Path) -> None:
    entry = tmp_path / "cache" / "warmstart" / "abc123"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_build_and_publish, [(str(tmp_path / "src"), str(entry), writer) for writer in (1, 2)])
    winners = [result for result in results if ":True:" in result]
    assert len(winners) == 1, results
    winner = winners[0].split(":")[0]
    assert all(result.endswith(f"writer {winner}") for result in results), "a writer did not use the entry"
    parts = {(entry / f"part{index}.bin").read_bytes() for index in range(20)}
    assert parts == {bytes([int(winner)]) * 200_000}, "the entry mixes two writers' files"
    assert sorted(path.name for path in entry.parent.iterdir()) == ["abc123"], "a temporary folder was left"


def test_a_killed_writers_temporary_folder_is_ignored_and_removed(tmp_path: Path) -> None:
    entry = tmp_path / "warmstart" / "abc123"
    entry.parent.mkdir(parents=True)
    gone = multiprocessing.get_context("spawn").Process(target=os.getpid)
    gone.start()
    gone.join()
    dead = entry.parent / f".abc123.{socket.gethostname()}-{gone.pid}-deadbeef.tmp"
    dead.mkdir()
    (dead / "model.safetensors").write_text("half written")
    alive = entry.parent / f".abc123.{socket.gethostname()}-{os.getpid()}-cafecafe.tmp"
    alive.mkdir()  # a writer still at work: left alone
    legacy = entry.parent / "abc123.tmp"  # what an older veritune left behind
    legacy.mkdir()
    os.utime(legacy, (0, 0))
    assert not entry.exists()
    remove_stale_temporaries(entry)
    assert not dead.exists() and alive.is_dir() and not legacy.exists()
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.safetensors").write_text("complete")
    assert publish_dir(source, entry)
    assert (entry / "model.safetensors").read_text() == "complete"


def test_a_writer_that_finishes_second_uses_the_first_writers_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race itself, made certain: another writer's entry appears while this one copies (the rename then
    meets a full directory, the error the demo once died of)."""
    import shutil

    entry = tmp_path / "cache" / "abc123"
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for source in (mine, theirs):
        source.mkdir()
        (source / "model.safetensors").write_text(source.name)
    copy = shutil.copytree

    def copy_while_another_writer_finishes(src: Path, dst: Path, **kwargs: object) -> object:
        result = copy(src, dst, **kwargs)
        if Path(src) == mine:
            monkeypatch.setattr(shutil, "copytree", copy)
            assert publish_dir(theirs, entry)
        return result

    monkeypatch.setattr(shutil, "copytree", copy_while_another_writer_finishes)
    assert not publish_dir(mine, entry)
    assert (entry / "model.safetensors").read_text() == "theirs"
    assert [path.name for path in entry.parent.iterdir()] == ["abc123"]
