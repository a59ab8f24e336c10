"""A real chat-completions HTTP server on 127.0.0.1 for LLM tests (ephemeral port, background thread)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], "str | tuple[int, str]"]


class FakeChatServer:
    """Answers ``POST /v1/chat/completions`` with ``responder(request_json)``.

    ``responder`` returns the assistant's text, or ``(status, body)`` for a raw HTTP reply. ``fail_first``
    makes the first N requests answer HTTP ``fail_status`` (with ``fail_headers``, e.g. ``Retry-After``).
    Every received body is kept in ``requests`` (and its headers in ``headers``); ``max_in_flight`` is the
    most requests handled at once.

        with FakeChatServer(lambda request: "no", fail_first=2) as server:
            ChatClient(server.base_url, "judge", cache_path=tmp / "c.sqlite").complete("Is it?")
    """

    def __init__(
        self,
        responder: Responder,
        fail_first: int = 0,
        fail_status: int = 500,
        fail_headers: dict[str, str] | None = None,
    ) -> None:
        self.responder = responder
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.fail_headers = dict(fail_headers or {})
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    body = json.loads(raw)
                except ValueError:  # a client stopped mid-request (a test that interrupts one): it reads nothing
                    self._send(400, "{}")
                    return
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(
                        {name.title(): value for name, value in self.headers.items()}
                    )  # clients differ in case
                    number = len(server.requests)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self.counted = True
                try:
                    if number <= server.fail_first:
                        self._send(server.fail_status, "{}", server.fail_headers)
                        return
                    reply = server.responder(body)
                    if isinstance(reply, tuple):
                        self._send(*reply)
                    else:
                        message = {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]}
                        self._send(200, json.dumps(message))
                finally:
                    self._leave()

            def _leave(self) -> None:
                # once only, and before the reply's body goes out: a client that has read its reply may send
                # its next request at once, and that one must not find this one still counted
                if getattr(self, "counted", False):
                    self.counted = False
                    with server._lock:
                        server.in_flight -= 1

            def _send(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self._leave()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        """The endpoint root to give a client, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    # a listen backlog of 5 (socketserver's default) drops connections under a burst of concurrent clients,
    # which then retry a second later: a stall that benchmarks would count as the client's
    request_queue_size = 128
