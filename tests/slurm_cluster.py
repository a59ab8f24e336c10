"""A real one-node Slurm cluster on localhost for tests: munged, slurmctld and slurmd started with a
generated configuration in a temporary directory, stopped afterwards (also on failure).

Needs Debian's ``slurm-wlm`` and ``munge`` (``.ci/install_slurm.sh``) and root; tests skip otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def available() -> str | None:
    """None when a local cluster can be started here, else the reason it cannot."""
    missing = [tool for tool in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(tool) is None]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing; run .ci/install_slurm.sh)"
    if os.geteuid() != 0:
        return "the local Slurm cluster runs its daemons as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_lines(host: str, nodes: int, memory_mb: int, gpus: int = 0) -> list[str]:
    """One node named after the host, or ``nodes`` nodes ``vt1``..``vtN`` on this host (one slurmd each,
    ``slurmd -N``), each reached at 127.0.0.1 on a port of its own; each with ``gpus`` GPUs when asked."""
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    if nodes == 1:
        return [f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb}{gres} State=UNKNOWN"]
    return [
        f"NodeName=vt{index} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs={os.cpu_count()} "
        f"RealMemory={memory_mb // nodes}{gres} State=UNKNOWN"
        for index in range(1, nodes + 1)
    ]


@contextmanager
def local_cluster(root: Path, nodes: int = 1, gpus: int = 0) -> Iterator[dict[str, str]]:
    """Start the cluster under ``root`` with ``nodes`` nodes (all on this machine); yields the environment
    that points Slurm commands at it. With ``gpus``, each node has that many fake GPUs (``gres/gpu`` on
    device files that are /dev/null): Slurm checks a job's GPU request against them, allocates and accounts
    them, but the job finds no GPU to compute on."""
    root.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    names = [host] if nodes == 1 else [f"vt{index}" for index in range(1, nodes + 1)]
    memory_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 - 1024
    (root / "state").mkdir(exist_ok=True)
    for name in names:
        (root / "spool" / name).mkdir(parents=True, exist_ok=True)
    (root / "munge").mkdir(exist_ok=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = root / "munge" / "munge.socket"
    config = root / "slurm.conf"
    config.write_text(
        "\n".join(
            [
                "ClusterName=veritunetest",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={munge_socket}",
                "CredType=cred/munge",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool/%n",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd-%n.pid",
                f"SlurmctldLogFile={root}/slurmctld.log",
                f"SlurmdLogFile={root}/slurmd-%n.log",
                f"SlurmctldPort={_free_port()}",
                *([f"SlurmdPort={_free_port()}"] if nodes == 1 else []),
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "ReturnToService=2",
                "MpiDefault=none",
                "MinJobAge=3600",
                *(["GresTypes=gpu"] if gpus else []),
                *_node_lines(host, nodes, memory_mb, gpus),
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    if gpus:
        # slurmd drops a GPU without a device file, and refuses one that is not a character device: each
        # fake GPU is a node with /dev/null's numbers (1, 3). gres.conf is read beside slurm.conf.
        for index in range(gpus):
            device = root / f"gpu{index}"
            if not device.exists():
                os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        (root / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={root}/gpu[0-{gpus - 1}]\n")
    env = dict(os.environ, SLURM_CONF=str(config))
    pids = {name: root / f"{name}.pid" for name in ("munged", "slurmctld")}
    pids.update({f"slurmd-{name}": root / f"slurmd-{name}.pid" for name in names})
    try:
        subprocess.run(
            [
                "munged",
                f"--key-file={key}",
                f"--socket={munge_socket}",
                f"--pid-file={pids['munged']}",
                f"--log-file={root}/munged.log",
                f"--seed-file={root}/munge.seed",
                "--force",
            ],
            check=True,
        )
        subprocess.run(["slurmctld", "-f", str(config)], check=True, env=env)
        for name in names:
            subprocess.run(["slurmd", "-f", str(config), *(["-N", name] if nodes > 1 else [])], check=True, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout.strip()
            if state == "idle":  # all nodes idle (sinfo groups nodes of one state on one line)
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"local Slurm node never became idle (state {state!r}); see {root}/slurmctld.log")
        yield env
    finally:
        for name in [*(f"slurmd-{n}" for n in names), "slurmctld", "munged"]:
            if pids[name].is_file():
                try:
                    os.kill(int(pids[name].read_text().strip()), signal.SIGTERM)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(1)


def job_state(job_id: str, env: dict[str, str]) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, env=env).stdout
    return next((field.split("=", 1)[1] for field in out.split() if field.startswith("JobState=")), "UNKNOWN")
