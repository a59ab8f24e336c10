"""The default demo run that tests/test_demo_outcome.py asserts, started beside the rest of the suite.

One whole `veritune demo` (both halves, seed 0, from nothing cached) takes about 26 minutes on 2 cores, most of it
one training process per half. When the outcome test is selected, conftest.py starts the run as soon as the suite is
collected and moves the outcome test to the end, so the run shares the machine with the other tests instead of
adding its whole length to the suite's: after the ORIC half's first minutes the FINER half's chain keeps one core and
the suite the other. The outcome test then waits for the run and reads its results. Its numbers depend neither on
the load beside it nor on the thread count (the same bytes on one thread and on two: docs/LAB_NOTEBOOK.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from helpers import REPO_ROOT, entry_env

MODULE = "test_demo_outcome.py"  # the tests that read the run
SEED = 0


class BackgroundDemo:
    """``veritune demo --seed 0`` in a temporary folder, its output in ``demo.log`` there."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="veritune-demo-outcome-"))
        self.out, self.log = self.root / "run", self.root / "demo.log"
        command = [sys.executable, "-m", "veritune.cli", "demo", "--out", str(self.out), "--seed", str(SEED)]
        # one torch thread a process throughout (OMP_NUM_THREADS set), as the demo runs its stages: the rest of the
        # suite shares the two cores meanwhile; the thread count changes no number
        env = entry_env(VERITUNE_CACHE=str(self.root / "cache"), OMP_NUM_THREADS="1")
        self.started = time.monotonic()
        with self.log.open("w") as stream:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
            )

    def result(self, timeout: float) -> dict[str, Any]:
        """Wait for the run (at most ``timeout`` seconds from its start); its stdout, results and minutes."""
        left = max(timeout - (time.monotonic() - self.started), 1.0)
        try:
            code = self.process.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the demo ran past {timeout:.0f} s (log: {self.log})") from None
        stdout = self.log.read_text(errors="replace")
        assert code == 0, f"the demo failed (exit {code}); its log's end:\n{stdout[-4000:]}"
        results = json.loads((self.out / "results.json").read_text())
        minutes = (time.monotonic() - self.started) / 60
        return {"stdout": stdout, "results": results, "minutes": minutes, "out": self.out}

    def stop(self) -> None:
        """End the run and every process it started (the suite was interrupted, or the run took too long)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


RUN: BackgroundDemo | None = None


def start() -> BackgroundDemo:
    global RUN
    if RUN is None:
        RUN = BackgroundDemo()
    return RUN


def finish() -> None:
    """At the suite's end: stop a run still going; remove the folder of one that ended well (a failed one stays for
    its log)."""
    global RUN
    if RUN is not None:
        running = RUN.process.poll() is None
        RUN.stop()
        if not running and RUN.process.returncode == 0:
            RUN.remove()
        RUN = None
