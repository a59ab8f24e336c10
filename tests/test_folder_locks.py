"""One writer per folder (core.lock): while a command writes a build's ``--out``, a run's ``output_dir``, an
``eval run --out`` or a run's eval folder, a second command into it is refused in one line naming the first;
once the first is killed (SIGKILL: it releases nothing itself), the next one proceeds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from eval_fixtures import write_oric_bench
from helpers import REPO_ROOT, entry_env, run_entry
from test_stale_outputs import finer_inputs, run_cli

from core.errors import UserError
from core.io import build_identity, claim_output_file
from core.lock import lock_path, release_all


def hold(setup: str) -> subprocess.Popen[str]:
    """A process that takes a lock through ``setup`` (the code path a command takes it by) and keeps it."""
    code = f"{setup}\nprint('held', flush=True)\nimport time\ntime.sleep(600)\n"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=entry_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = process.stdout.readline()
    if line != "held\n":
        kill(process)
        pytest.fail(f"the holder did not take its lock: {process.stderr.read()[-2000:]}")
    return process


def kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def refusal(err: str, what: str, command: str, process: subprocess.Popen[str]) -> None:
    """``err`` is one ``error:`` line refusing ``what``, naming the holder's command, pid and host."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {what}: in use by {command} (pid {process.pid} on {socket.gethostname()}, ")


def test_a_build_into_an_out_being_built_is_refused_until_the_first_is_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    inputs = finer_inputs(tmp_path)
    out = tmp_path / "finer"
    command = ["build", "finer", "--scene-graphs", str(inputs["b"]), "--image-root", str(inputs["images"])]
    holder = hold(
        "from core.io import claim_output_dir\nfrom core.lock import set_command\nset_command('veritune build finer')\n"
        f"claim_output_dir({str(out)!r}, {{'command': 'build finer'}}, force=False)"
    )
    try:
        for extra in ([], ["--force"]):
            code, _, err = run_cli([*command, "--out", str(out), *extra], capsys)
            assert code == 2
            refusal(err, f"--out {out}", "veritune build finer", holder)
    finally:
        kill(holder)
    assert not out.exists()
    assert lock_path(out).is_file(), "the killed holder left its lock file (unlocked)"
    code, _, err = run_cli([*command, "--out", str(out)], capsys)
    assert code == 0, err
    assert (out / "train.jsonl").is_file()
    assert not lock_path(out).exists(), "the lock outlived the command"
    assert not any(".veritune.lock" in path.name for path in out.rglob("*")), "the lock was taken into the output"


def test_a_file_build_with_force_is_refused_while_another_holds_the_file(tmp_path: Path) -> None:
    out = tmp_path / "questions.json"
    holder = hold(f"from core.io import claim_output_file\nclaim_output_file({str(out)!r}, {{'a': 1}}, force=True)")
    try:
        with pytest.raises(UserError, match=rf"^--out {out}: in use by -c \(pid {holder.pid} on "):
            claim_output_file(out, build_identity("build oric", {}, {}), force=True)
    finally:
        kill(holder)
    staged = claim_output_file(out, build_identity("build oric", {}, {}), force=True)
    assert staged.path.parent.is_dir()
    release_all()
    assert not lock_path(out).exists()


def test_a_second_run_into_an_output_dir_being_trained_is_refused_and_eval_watch_is_not(
    tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from conftest import write_oric_fixture
    from test_resume import grpo_command

    from veritune.cli import main

    data = write_oric_fixture(tmp_path / "data")
    run = tmp_path / "run"
    holder = hold(
        f"from core.lock import hold_lock, set_command\nset_command('grpo.py')\nhold_lock({str(run)!r}, '', '')"
    )
    try:
        result = run_entry("grpo.py", *grpo_command(tiny_qwen3vl, data, run))
        assert result.returncode == 2
        refusal(result.stderr.strip().splitlines()[-1], f"output_dir {run}", "grpo.py", holder)
        assert not (run / "train_log.jsonl").exists() and not (run / "veritune_run.json").exists()

        # the watcher writes RUN_DIR/eval: the training's lock does not stop it
        run.mkdir()  # as the training does once it starts
        bench = tmp_path / "bench"
        write_oric_bench(bench, questions=2)
        code = main(["eval", "watch", str(run), "--benchmarks", "oric_bench", "--data-root", str(bench), "--once"])
        assert code == 0
        assert "evaluated checkpoints: none new" in capsys.readouterr().out
    finally:
        kill(holder)

    from transformers import TrainingArguments

    from finetune.training import start_run

    assert start_run(TrainingArguments(output_dir=str(run), report_to="none", use_cpu=True)) is False
    assert f'"pid": {os.getpid()}' in lock_path(run).read_text(), "the run holds its output_dir"
    release_all()


def test_eval_run_and_eval_watch_refuse_a_second_writer(
    tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bench = tmp_path / "bench"
    write_oric_bench(bench, questions=2)
    data = ["--benchmarks", "oric_bench", "--data-root", str(bench), "--limit", "1", "--max-new-tokens", "2"]
    out = tmp_path / "results"
    holder = hold(
        "from core.io import hold_output_lock\nfrom core.lock import set_command\n"
        f"set_command('veritune eval run')\nhold_output_lock({str(out)!r})"
    )
    try:
        code, _, err = run_cli(
            ["eval", "run", "--model", str(tiny_qwen3vl), *data, "--allow-unresolved", "--out", str(out)], capsys
        )
        assert code == 2
        refusal(err, f"--out {out}", "veritune eval run", holder)
        assert not out.exists()
    finally:
        kill(holder)
    code, _, err = run_cli(
        ["eval", "run", "--model", str(tiny_qwen3vl), *data, "--allow-unresolved", "--out", str(out)], capsys
    )
    assert code == 0, err
    assert (out / "oric_bench" / "predictions.jsonl").is_file()

    run = tmp_path / "run"
    run.mkdir()
    watcher = hold(
        "from core.lock import hold_lock, set_command\nset_command('veritune eval watch')\n"
        f"hold_lock({str(run / 'eval')!r}, '', '')"
    )
    try:
        code, _, err = run_cli(["eval", "watch", str(run), *data, "--once"], capsys)
        assert code == 2
        refusal(err, f"eval watch {run}", "veritune eval watch", watcher)
    finally:
        kill(watcher)
    code, _, err = run_cli(["eval", "watch", str(run), *data, "--once"], capsys)
    assert code == 0, err
