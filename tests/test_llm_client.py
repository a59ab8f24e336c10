"""The cached OpenAI-compatible client against a real loopback HTTP server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fake_openai_server import FakeChatServer

from data_builders.llm_client import ChatClient
from veritune.errors import UserError


def echo(request: dict) -> str:
    return "answer to " + request["messages"][-1]["content"]


def client(server: FakeChatServer, tmp_path: Path, **kwargs) -> ChatClient:
    return ChatClient(server.base_url, "judge-model", cache_path=tmp_path / "cache.sqlite", backoff=0.01, **kwargs)


def test_request_payload_and_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123")
    with FakeChatServer(echo) as server:
        answer = client(server, tmp_path).complete("Is it?", system="Be brief.")
    assert answer == "answer to Is it?"
    assert server.requests == [
        {"model": "judge-model", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is it?"}],
         "temperature": 0.0}
    ]  # fmt: skip
    assert server.headers[0]["Authorization"] == "Bearer sk-secret-123"
    assert b"sk-secret-123" not in (tmp_path / "cache.sqlite").read_bytes()


def test_rerun_sends_zero_requests(tmp_path: Path) -> None:
    prompts = [f"q{i}" for i in range(6)]
    with FakeChatServer(echo) as server:
        first = client(server, tmp_path).complete_many(prompts)
        again = client(server, tmp_path)
        second = again.complete_many(prompts)
    assert first == second == [f"answer to q{i}" for i in range(6)]
    assert len(server.requests) == 6
    assert again.requests_sent == 0 and again.cache_hits == 6


@pytest.mark.parametrize("status", [500, 429, 503])
def test_retries_after_injected_failures(tmp_path: Path, status: int) -> None:
    with FakeChatServer(echo, fail_first=2, fail_status=status) as server:
        chat = client(server, tmp_path)
        assert chat.complete("x") == "answer to x"
    assert len(server.requests) == 3 and chat.requests_sent == 3


def test_malformed_body_is_retried(tmp_path: Path) -> None:
    replies = iter([(200, "not json"), (200, '{"choices": []}'), "fine"])
    with FakeChatServer(lambda request: next(replies)) as server:
        assert client(server, tmp_path).complete("x") == "fine"
    assert len(server.requests) == 3


def test_unreachable_endpoint_is_one_clear_error(tmp_path: Path) -> None:
    chat = ChatClient("http://127.0.0.1:9/v1", "m", cache_path=tmp_path / "c.sqlite", max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(UserError, match=r"unreachable after 2 attempts.*cached, rerun to resume"):
        chat.complete("x")


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    def slow(request: dict) -> str:
        time.sleep(0.05)
        return "ok"

    with FakeChatServer(slow) as server:
        client(server, tmp_path, concurrency=3).complete_many([f"q{i}" for i in range(12)])
    assert 1 < server.max_in_flight <= 3


def test_client_errors_are_not_retried(tmp_path: Path) -> None:
    with FakeChatServer(lambda request: (400, "{}")) as server:
        with pytest.raises(UserError, match="refused the request: HTTP 400"):
            client(server, tmp_path).complete("x")
    assert len(server.requests) == 1
