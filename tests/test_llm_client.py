"""The cached OpenAI-compatible client against a real loopback HTTP server."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeChatServer

from core.errors import UserError
from core.llm_client import PROBE_PROMPT, ChatClient


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
        {
            "model": "judge-model",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is it?"}],
            "temperature": 0.0,
        }
    ]
    assert "Authorization" not in server.headers[0]  # OPENAI_API_KEY is for OpenAI's endpoint only


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
    chat = ChatClient(
        "http://127.0.0.1:9/v1", "m", cache_path=tmp_path / "c.sqlite", max_retries=1, backoff=0.01, timeout=2
    )
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


@pytest.mark.parametrize("status", [502, 520])
def test_every_5xx_is_retried(tmp_path: Path, status: int) -> None:
    with FakeChatServer(echo, fail_first=1, fail_status=status) as server:
        assert client(server, tmp_path).complete("x") == "answer to x"
    assert len(server.requests) == 2


def test_retry_after_header_is_honoured(tmp_path: Path) -> None:
    with FakeChatServer(echo, fail_first=1, fail_status=429, fail_headers={"Retry-After": "0.3"}) as server:
        start = time.perf_counter()
        client(server, tmp_path).complete("x")
        waited = time.perf_counter() - start
    assert waited >= 0.3 and len(server.requests) == 2  # the client's own backoff here is 0.01 s


def test_retries_exhausted_error_keeps_earlier_answers(tmp_path: Path) -> None:
    with FakeChatServer(echo) as server:
        client(server, tmp_path).complete("first")
        server.fail_first = 10**6  # from now on every request fails
        with pytest.raises(
            UserError,
            match=r"failed after 3 attempts: the server answered HTTP 500: '\{\}'; answers received so far are cached",
        ):
            client(server, tmp_path, max_retries=2).complete("second")
        sent = len(server.requests)
        assert client(server, tmp_path).complete("first") == "answer to first"
    assert len(server.requests) == sent


def test_repeated_prompts_in_a_batch_are_sent_once(tmp_path: Path) -> None:
    with FakeChatServer(echo) as server:
        chat = client(server, tmp_path)
        answers = chat.complete_many(["a", "b", "a", "a"])
    assert answers == ["answer to a", "answer to b", "answer to a", "answer to a"]
    assert sorted(r["messages"][0]["content"] for r in server.requests) == ["a", "b"]
    assert chat.requests_sent == 2 and chat.cache_hits == 2


def test_rejected_key_names_the_variable_not_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-wrong-456")
    with FakeChatServer(lambda request: (401, "{}")) as server:
        with pytest.raises(UserError) as error:
            client(server, tmp_path, api_key_env="MY_LLM_KEY").complete("x")
    assert "HTTP 401 (check the API key in $MY_LLM_KEY)" in str(error.value)
    assert "sk-wrong-456" not in str(error.value)
    assert server.headers[0]["Authorization"] == "Bearer sk-wrong-456"


def test_cache_is_keyed_by_model(tmp_path: Path) -> None:
    with FakeChatServer(lambda request: request["model"]) as server:
        first = ChatClient(server.base_url, "model-a", cache_path=tmp_path / "c.sqlite").complete("x")
        second = ChatClient(server.base_url, "model-b", cache_path=tmp_path / "c.sqlite").complete("x")
    assert (first, second) == ("model-a", "model-b") and len(server.requests) == 2


UNREACHABLE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, the connection is refused


def offline(tmp_path: Path, url: str = UNREACHABLE) -> ChatClient:
    """A client of ``url`` with nothing listening there (a closed server's URL: the same endpoint, down)."""
    return ChatClient(url, "judge-model", cache_path=tmp_path / "cache.sqlite", max_retries=1, backoff=0.01, timeout=2)


def test_fully_cached_rebuild_needs_no_endpoint(tmp_path: Path) -> None:
    prompts = ["a", "b", "a"]
    with FakeChatServer(echo) as server:
        client(server, tmp_path).complete_many(prompts)
    chat = offline(tmp_path, server.base_url)
    chat.check_endpoint()  # every answer is cached: nothing to check yet
    assert chat.complete_many(prompts) == ["answer to a", "answer to b", "answer to a"]
    assert chat.complete("b") == "answer to b"
    assert chat.requests_sent == 0


def test_endpoint_is_probed_at_the_first_cache_miss(tmp_path: Path) -> None:
    with FakeChatServer(echo) as server:
        client(server, tmp_path).complete("a")
    chat = offline(tmp_path, server.base_url)
    chat.check_endpoint()
    assert chat.complete("a") == "answer to a"
    with pytest.raises(
        UserError,
        match=rf"^LLM endpoint {re.escape(server.base_url)}/chat/completions unreachable after 2 attempts \(.*\) "
        r"\(checked before the first request not answered by the cache\)$",
    ):
        chat.complete_many(["a", "b"])


def test_endpoint_is_probed_once(tmp_path: Path) -> None:
    with FakeChatServer(echo) as server:
        client(server, tmp_path).complete("a")
        chat = client(server, tmp_path)
        chat.check_endpoint()  # answers of this model are cached: the probe waits for a cache miss
        assert server.requests == [
            {"model": "judge-model", "messages": [{"role": "user", "content": "a"}], "temperature": 0.0}
        ]
        chat.complete_many(["a", "b", "c"])
        chat.complete("d")
        contents = [request["messages"][0]["content"] for request in server.requests]
    assert contents == ["a", PROBE_PROMPT, "b", "c", "d"] or contents == ["a", PROBE_PROMPT, "c", "b", "d"]
    assert chat.requests_sent == 3  # the probe is not counted


def test_a_fresh_cache_probes_before_the_build(tmp_path: Path) -> None:
    chat = offline(tmp_path)
    with pytest.raises(
        UserError, match=r"unreachable after 2 attempts .*\(checked before building: nothing was written\)$"
    ):
        chat.check_endpoint()  # no answer of this model cached: every request would miss
    with FakeChatServer(echo) as server:
        chat = client(server, tmp_path)
        chat.check_endpoint()
        chat.complete("x")
        contents = [request["messages"][0]["content"] for request in server.requests]
    assert contents == [PROBE_PROMPT, "x"]
