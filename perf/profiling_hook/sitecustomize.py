"""Imported at start-up by the runs that ``perf/bench_gpu.py`` launches (it puts this folder first on
PYTHONPATH and sets VERITUNE_PROFILE_LOG): TRL's profiling timers (``trl.extras.profiling``), which TRL
sends only to experiment trackers, are also appended to that JSONL file, one ``{name: seconds}`` per timer,
so the benchmark reads the rollout time without W&B. Outside such a run it does nothing."""

import json
import os

_LOG = os.environ.get("VERITUNE_PROFILE_LOG")

if _LOG:
    from trl.extras import profiling

    _log_metrics = profiling.ProfilingContext._log_metrics

    def _log_and_record(self, duration: float) -> None:
        with open(_LOG, "a") as sink:
            sink.write(json.dumps({self.name: duration}) + "\n")
        _log_metrics(self, duration)

    profiling.ProfilingContext._log_metrics = _log_and_record
