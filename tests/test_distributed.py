"""Multi-process runs on CPU: DeepSpeed ZeRO-3 GRPO, ZeRO-2 DPO, and a two-"machine" launch over loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from helpers import REPO_ROOT, entry_env, write_finer_fixture

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(*args: str | Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCH, *map(str, args)], cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=timeout
    )


def test_zero3_grpo_two_processes(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data, images = write_oric_fixture(tmp_path / "data")
    result = launch(
        "--config_file",
        "recipes/accelerate/zero3.yaml",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        free_port(),
        "finetune/grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        data,
        "--image_root",
        images,
        "--output_dir",
        tmp_path / "run",
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--per_device_train_batch_size",
        "2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DeepSpeed" in result.stderr or "deepspeed" in result.stderr.lower()
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and "rewards/format_reward/mean" in state["log_history"][0]


def test_zero2_dpo_two_processes(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    write_finer_fixture(tmp_path / "finer")
    result = launch(
        "--config_file",
        "recipes/accelerate/zero2.yaml",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        free_port(),
        "finetune/dpo.py",
        "recipes/miniature/tiny_finer_demo.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        tmp_path / "finer",
        "--output_dir",
        tmp_path / "run",
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--per_device_train_batch_size",
        "2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and "rewards/margins" in state["log_history"][0]


def excerpt(output: str) -> str:
    """What led to a worker's abort, where one aborted (a C++ ``terminate``), else the output's end."""
    index = output.find("terminate called")
    return output[max(index - 2500, 0) : index + 500] if index >= 0 else output[-3000:]


def test_two_machines_over_loopback(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data, images = write_oric_fixture(tmp_path / "data")
    port = free_port()
    ranks = []
    for rank in (0, 1):
        command = [
            *LAUNCH,
            "--config_file",
            "recipes/accelerate/ddp_multinode.yaml",
            # no `--cpu`: accelerate's MULTI_CPU launch starts a lone process where MPI is absent (two unjoined
            # runs); the config's MULTI_GPU launch joins them, and the recipe's use_cpu keeps them on gloo
            "--mixed_precision",
            "no",
            "--num_machines",
            "2",
            "--machine_rank",
            str(rank),
            "--num_processes",
            "2",
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            str(port),
            "finetune/grpo.py",
            "recipes/miniature/tiny_oric_demo.yaml",
            "--model_name_or_path",
            str(tiny_qwen3vl),
            "--dataset_path",
            str(data),
            "--image_root",
            str(images),
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "2",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--per_device_train_batch_size",
            "2",
        ]
        ranks.append(
            subprocess.Popen(
                command, cwd=REPO_ROOT, env=entry_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = [process.communicate(timeout=600)[0] for process in ranks]
    for rank, output in enumerate(outputs):  # whole, for a failure's diagnosis (tails only in the message)
        (tmp_path / f"machine{rank}.log").write_text(output)
    tails = "".join(f"\n--- machine {rank}: ...{excerpt(output)}" for rank, output in enumerate(outputs))
    assert [process.returncode for process in ranks] == [0, 0], f"logs in {tmp_path}{tails}"
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["global_step"] == 2
    assert json.loads((tmp_path / "run" / "veritune_run.json").read_text())["world_size"] == 2  # joined, not two runs


def test_an_entry_script_leaves_an_open_process_group(tmp_path: Path) -> None:
    """``run_entry_script``'s last step closes a group that is still open (a run that stopped before training), and
    does nothing where none is."""
    import torch.distributed as dist

    from finetune.recipe import leave_process_group

    leave_process_group()  # none open: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    leave_process_group()
    assert not dist.is_initialized()
