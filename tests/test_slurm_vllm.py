"""vLLM server mode on Slurm: the layout read from a recipe, ``veritune slurm submit`` adding the server
node, and slurm/train.sbatch on a real two-node Slurm cluster on localhost (tests/slurm_cluster.py) with
the server and the trainers stubbed (tests/slurm_vllm_stubs.py: no GPU here)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, entry_env
from slurm_cluster import available, job_state, local_cluster

from core.errors import UserError
from veritune.cli import main
from veritune.slurm_layout import shell_assignments, vllm_server_layout

SERVER_RECIPE = "recipes/qwen3vl_oric_vllm_server.yaml"
STUBS = REPO_ROOT / "tests" / "slurm_vllm_stubs.py"


# ---------------------------------------------------------------------------------------------- layout


def test_layout_of_a_server_recipe_is_the_trl_vllm_serve_command() -> None:
    layout = vllm_server_layout(SERVER_RECIPE)
    assert layout is not None and layout.port == 8000
    assert layout.serve_args == [
        "--model",
        "Qwen/Qwen3-VL-8B-Instruct",
        "--port",
        "8000",
        "--dtype",
        "bfloat16",
        "--max_model_len",
        "1280",
    ]
    assert vllm_server_layout(SERVER_RECIPE, ["--vllm_server_port", "9001"]).port == 9001
    assert vllm_server_layout(SERVER_RECIPE, ["--vllm_mode=colocate"]) is None
    assert vllm_server_layout(SERVER_RECIPE, ["--use_vllm", "false"]) is None
    assert vllm_server_layout("recipes/qwen3vl_oric_vllm.yaml") is None  # colocated engines: no server node
    assert vllm_server_layout("recipes/qwen3vl_oric.yaml") is None
    with pytest.raises(UserError, match="vllm_server_base_url: the Slurm job starts its own vLLM server"):
        vllm_server_layout(SERVER_RECIPE, ["--vllm_server_base_url", "http://elsewhere:8000"])
    # What the sbatch script evaluates: a bash array that keeps each argument whole.
    script = shell_assignments(vllm_server_layout(SERVER_RECIPE)) + 'printf "%s|" "${VLLM_SERVE_ARGS[@]}"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out == "--model|Qwen/Qwen3-VL-8B-Instruct|--port|8000|--dtype|bfloat16|--max_model_len|1280|"
    assert shell_assignments(None) == "VLLM_SERVER=0\n"


def test_submit_asks_for_a_server_node_beside_the_trainers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["slurm", "submit", "--entry", "grpo", "--gpus-per-node", "4", "--dry-run", "--run-dir", "outputs/r"]
    assert main([*argv, "--recipe", SERVER_RECIPE, "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "vLLM server mode: 2 training node(s) + 1 node for `trl vllm-serve` Qwen/Qwen3-VL-8B-Instruct" in out
    assert (
        f"--nodes=3 --gpus-per-node=4 {REPO_ROOT}/slurm/train.sbatch grpo recipes/qwen3vl_oric_vllm_server.yaml" in out
    )
    assert main([*argv, "--recipe", "recipes/qwen3vl_oric_vllm.yaml", "--nodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "--nodes=1 --gpus-per-node=4" in out and "vLLM server mode" not in out


# ---------------------------------------------------------------------------------------------- on Slurm

needs_slurm = pytest.mark.skipif(available() is not None, reason=str(available()))


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory):
    if available() is not None:
        pytest.skip(str(available()))
    with local_cluster(tmp_path_factory.mktemp("slurm2"), nodes=2) as env:
        yield env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def submit(env: dict[str, str], tmp_path: Path, *args: str, nodes: int = 2, **extra: str) -> tuple[str, str, int]:
    """``sbatch --wait`` slurm/train.sbatch with both GPU programs stubbed; (job id, job log, exit code)."""
    stub_python = tmp_path / "python"  # the trainers' launcher stubbed; everything else is the real Python
    stub_python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ] && [ "$2" = "veritune.launch" ]; then\n'
        f'  shift 2; exec {sys.executable} {STUBS} trainer "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    stub_python.chmod(0o755)
    (tmp_path / "stub").mkdir(exist_ok=True)
    job_env = {
        **entry_env(),
        **env,
        "VERITUNE_PYTHON": str(stub_python),
        "VERITUNE_VLLM_SERVE": f"{sys.executable} {STUBS} server",
        "VERITUNE_VLLM_POLL_INTERVAL": "1",
        "VERITUNE_RUN_ROOT": str(tmp_path / "runs"),
        "STUB_DIR": str(tmp_path / "stub"),
        **extra,
    }
    command = ["sbatch", "--parsable", "--wait", f"--nodes={nodes}", f"--output={tmp_path}/%j.out"]
    command += ["--job-name=vllm-server", "slurm/train.sbatch", "grpo", SERVER_RECIPE, *args]
    result = subprocess.run(command, cwd=REPO_ROOT, env=job_env, capture_output=True, text=True, timeout=600)
    job = result.stdout.strip().split(";")[0]
    log = (tmp_path / f"{job}.out").read_text() if job and (tmp_path / f"{job}.out").is_file() else result.stderr
    return job, log, result.returncode


def stub_record(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "stub" / name).read_text())


@needs_slurm
def test_server_on_the_last_node_trainers_on_the_others_after_health(two_nodes, tmp_path: Path) -> None:
    port = free_port()
    job, log, code = submit(
        two_nodes, tmp_path, "--", "--vllm_server_port", str(port), "--max_steps", "1", STUB_SERVER_DELAY="3"
    )
    assert code == 0, log[-3000:]
    assert job_state(job, two_nodes) == "COMPLETED"
    server = stub_record(tmp_path, "server.json")
    assert server["node"] == "vt2"  # the job's last node
    argv = server["argv"]
    assert argv[argv.index("--model") + 1] == "Qwen/Qwen3-VL-8B-Instruct"
    assert argv[argv.index("--port") + 1] == str(port)
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "127.0.0.1"  # vt2's NodeAddr only
    assert argv[argv.index("--max_model_len") + 1] == "1280"
    assert argv[argv.index("--tensor_parallel_size") + 1] == "1"  # no GPUs on the test nodes
    trainer = stub_record(tmp_path, "trainer-vt1.json")
    assert not (tmp_path / "stub" / "trainer-vt2.json").exists()  # the server node does not train
    assert trainer["node_id"] == "0" and trainer["health"] == 200  # the server answered before training began
    targs = trainer["argv"]
    assert targs[targs.index("--vllm_server_host") + 1] == "127.0.0.1"  # vt2's address (NodeAddr)
    assert targs[targs.index("--vllm_server_port") + 1] == str(port)
    assert targs[targs.index("--num_machines") + 1] == "1" and targs[targs.index("--num_processes") + 1] == "1"
    assert "finetune/grpo.py" in targs and SERVER_RECIPE in targs
    assert f"vLLM server ready at http://127.0.0.1:{port}" in log
    assert (tmp_path / "stub" / "server_stopped.json").is_file()  # stopped when training ended
    run_dir = tmp_path / "runs" / f"vllm-server-{job}"
    assert "stub vllm server: listening on" in (run_dir / "vllm_server.log").read_text()


@needs_slurm
def test_a_server_that_dies_fails_the_job_before_training(two_nodes, tmp_path: Path) -> None:
    job, log, code = submit(two_nodes, tmp_path, "--", "--vllm_server_port", str(free_port()), STUB_SERVER_FAIL="1")
    assert code != 0 and job_state(job, two_nodes) == "FAILED"
    assert "error: the vLLM server on vt2 exited before it answered /health (see " in log
    assert not list((tmp_path / "stub").glob("trainer-*.json"))


@needs_slurm
def test_a_server_recipe_on_one_node_is_refused(two_nodes, tmp_path: Path) -> None:
    job, log, code = submit(two_nodes, tmp_path, nodes=1)
    assert code != 0 and job_state(job, two_nodes) == "FAILED"
    assert "which needs a node of its own: submit trainer nodes + 1 (sbatch --nodes 2" in log
    assert not (tmp_path / "stub" / "server.json").exists()


@needs_slurm
def test_a_trainer_failure_still_stops_the_server_and_fails_the_job(two_nodes, tmp_path: Path) -> None:
    job, log, code = submit(two_nodes, tmp_path, "--", "--vllm_server_port", str(free_port()), STUB_TRAINER_EXIT="1")
    assert code != 0 and job_state(job, two_nodes) == "FAILED", log[-2000:]
    assert stub_record(tmp_path, "trainer-vt1.json")["health"] == 200
    assert (tmp_path / "stub" / "server_stopped.json").is_file()
