"""Stand-ins for the two GPU programs of a vLLM server-mode Slurm job, for the local (CPU) cluster.

``server``: in place of ``trl vllm-serve``; records its arguments and node, waits ``STUB_SERVER_DELAY``
seconds (a model loading), then answers ``GET /health`` with 200 on its ``--host`` address (TRL's default,
``0.0.0.0``, without one) until SIGTERM, and records that it was stopped. ``STUB_SERVER_FAIL=1`` makes it
exit at once (a server that cannot start).

``trainer``: in place of ``python -m veritune.launch ...`` on each training node; records its arguments and
node, and whether the server's /health answered at the ``--vllm_server_host``/``--vllm_server_port`` it was
given (so the test sees the server was up, at that address, before training started).

Records go to ``$STUB_DIR`` as JSON files.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path


def _record(name: str, payload: dict) -> None:
    path = Path(os.environ["STUB_DIR"]) / name
    path.write_text(json.dumps(payload))


def server(args: list[str]) -> int:
    port = int(args[args.index("--port") + 1])
    host = args[args.index("--host") + 1] if "--host" in args else "0.0.0.0"
    _record("server.json", {"argv": args, "node": os.environ.get("SLURMD_NODENAME")})
    if os.environ.get("STUB_SERVER_FAIL"):
        print("stub vllm server: failing on purpose", flush=True)
        return 3
    time.sleep(float(os.environ.get("STUB_SERVER_DELAY", "0")))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer((host, port), Health)

    def stop(*_: object) -> None:
        _record("server_stopped.json", {"node": os.environ.get("SLURMD_NODENAME")})
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"stub vllm server: listening on {port}", flush=True)
    httpd.serve_forever()
    return 0


def trainer(args: list[str]) -> int:
    host = args[args.index("--vllm_server_host") + 1] if "--vllm_server_host" in args else None
    port = args[args.index("--vllm_server_port") + 1] if "--vllm_server_port" in args else None
    health = None
    if host and port:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=10) as response:
            health = response.status
    node = os.environ.get("SLURMD_NODENAME")
    _record(
        f"trainer-{node}.json",
        {"argv": args, "node": node, "node_id": os.environ.get("SLURM_NODEID"), "health": health},
    )
    return int(os.environ.get("STUB_TRAINER_EXIT", "0"))


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    sys.exit(server(rest) if role == "server" else trainer(rest))
