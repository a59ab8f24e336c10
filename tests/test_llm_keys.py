"""Where an LLM API key goes, through the public commands against a loopback chat-completions server: no key
unless its variable is named (OPENAI_API_KEY only for OpenAI's own endpoint), never over plain http to
another machine; endpoints printed and recorded without userinfo or query; answers cached per endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_fixtures import write_oric_bench
from fake_openai_server import FakeChatServer
from test_eval_judge import mcq_judge, write_predictions
from test_eval_mcq import finer_rows, write_csv
from test_finer_llm import responder, write_captions

from core.llm_client import ChatClient
from veritune.cli import main

SECRET = "sk-do-not-leak-123"


def build_finer(tmp_path: Path, base_url: str, *extra: str) -> list[str]:
    captions, images = write_captions(tmp_path / "in")
    return [
        "build", "finer", "--captions", str(captions), "--image-root", str(images), "--out", str(tmp_path / "out"),
        "--llm-base-url", base_url, "--llm-model", "phi-4", "--llm-cache", str(tmp_path / "c.sqlite"), *extra,
    ]  # fmt: skip


def test_no_key_is_sent_unless_its_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # a real key in the user's shell, meant for OpenAI
    with FakeChatServer(responder) as server:
        assert main(build_finer(tmp_path, server.base_url)) == 0
    assert server.headers and all("Authorization" not in headers for headers in server.headers)


def test_openai_organization_and_project_ids_stay_with_openai(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-do-not-leak")  # the openai client sends these on every request
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-do-not-leak")
    with FakeChatServer(responder) as server:
        assert main(build_finer(tmp_path, server.base_url)) == 0
    names = {name.lower() for headers in server.headers for name in headers}
    assert server.headers and not names & {"openai-organization", "openai-project"}, names
    official = ChatClient("https://api.openai.com/v1", "gpt-4o", cache_path=tmp_path / "o.sqlite")._openai_client()
    assert (official.organization, official.project) == ("org-do-not-leak", "proj-do-not-leak")


def test_a_named_key_reaches_the_endpoint_and_is_written_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VERITUNE_TEST_LLM_KEY", SECRET)
    with FakeChatServer(responder) as server:
        assert main(build_finer(tmp_path, server.base_url, "--llm-api-key-env", "VERITUNE_TEST_LLM_KEY")) == 0
    assert server.headers and all(headers["Authorization"] == f"Bearer {SECRET}" for headers in server.headers)
    printed = capsys.readouterr()
    written = [path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()]
    assert SECRET not in printed.out + printed.err and not any(SECRET.encode() in data for data in written)


@pytest.mark.parametrize(
    ("url", "extra", "message"),
    [
        (
            "http://llm.invalid:8000/v1",
            ["--llm-api-key-env", "VERITUNE_TEST_LLM_KEY"],
            "error: LLM endpoint http://llm.invalid:8000/v1: refusing to send the API key in $VERITUNE_TEST_LLM_KEY "
            "over plain http to llm.invalid; use https, or a loopback address (e.g. an SSH tunnel)",
        ),
        (
            f"http://me:{SECRET}@llm.invalid:8000/v1?token={SECRET}",
            [],
            "error: LLM endpoint http://llm.invalid:8000/v1: refusing to send the URL's user and password over "
            "plain http to llm.invalid; use https, or a loopback address (e.g. an SSH tunnel)",
        ),
    ],
)
def test_a_credential_over_plain_http_to_another_host_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    url: str,
    extra: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("VERITUNE_TEST_LLM_KEY", SECRET)
    with pytest.raises(SystemExit) as refused:
        main(build_finer(tmp_path, url, "--llm-max-retries", "0", *extra))
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err == message + "\n" and SECRET not in err
    assert not (tmp_path / "out").exists()


def test_recorded_and_printed_endpoints_have_no_userinfo_or_query(
    tmp_path: Path, tiny_qwen3vl: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, images = write_oric_bench(tmp_path / "data", questions=2)
    with FakeChatServer(responder) as server:
        secret_url = server.base_url.replace("http://", f"http://me:{SECRET}@") + f"?key={SECRET}#frag"
        assert main(build_finer(tmp_path / "finer", secret_url)) == 0
        server.responder = lambda request: "yes"  # the eval judge's verdicts
        eval_run = [
            "eval", "run", "--model", str(tiny_qwen3vl), "--benchmarks", "oric_bench", "--data",
            f"oric_bench={data}", "--image-root", str(images), "--limit", "1", "--max-new-tokens", "2",
            "--allow-unresolved", "--out", str(tmp_path / "eval"), "--llm-base-url", secret_url,
            "--llm-model", "judge", "--llm-cache", str(tmp_path / "judge.sqlite"),
        ]  # fmt: skip
        assert main(eval_run) == 0
        server.responder = lambda request: (401, "{}")  # an error line names the endpoint too
        with pytest.raises(SystemExit):
            main(build_finer(tmp_path / "refused", secret_url, "--llm-cache", str(tmp_path / "empty.sqlite")))
    assert json.loads((tmp_path / "finer" / "out" / "manifest.json").read_text())["llm"]["base_url"] == server.base_url
    assert json.loads((tmp_path / "eval" / "results.json").read_text())["config"]["judge"] == {
        "model": "judge",
        "base_url": server.base_url,
    }
    printed = capsys.readouterr()
    assert f"LLM endpoint {server.base_url}/chat/completions refused the request: HTTP 401" in printed.err
    written = [path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()]
    assert SECRET not in printed.out + printed.err and not any(SECRET.encode() in data for data in written)


def test_two_endpoints_under_one_model_name_share_no_answers(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    data = write_csv(tmp_path / "finer.csv", finer_rows())
    predictions = write_predictions(tmp_path / "p.jsonl", {f"finer/{i}": "I pick the second one" for i in range(6)})
    score = [
        "eval", "score", "--benchmarks", "finer", "--data", f"finer={data}", "--predictions", str(predictions),
        "--allow-unresolved", "--llm-model", "same-name", "--llm-cache", str(tmp_path / "judge.sqlite"),
    ]  # fmt: skip
    results = []
    for judge in (mcq_judge, lambda request: "none"):  # two servers, one model name, other answers
        with FakeChatServer(judge) as server:
            assert main([*score, "--llm-base-url", server.base_url]) == 0
        assert server.requests  # the second server is asked, not answered from the first one's cache
        results.append(json.loads((tmp_path / "p.metrics.json").read_text())["answer_resolution"])
    assert (results[0]["judge"], results[1]["judge"]) == (6, 0)


def test_official_openai_endpoint_takes_openai_api_key_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    official = ChatClient("https://api.openai.com/v1", "gpt", cache_path=":memory:")
    other = ChatClient("https://llm.example.org/v1", "gpt", cache_path=":memory:")
    assert (official.api_key_env, other.api_key_env) == ("OPENAI_API_KEY", None)


@pytest.mark.parametrize("named_key", [False, True])
def test_openai_custom_headers_stay_with_openai(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named_key: bool
) -> None:
    """OPENAI_CUSTOM_HEADERS (the openai client sends each line as a header) reaches OpenAI's endpoint only; at
    another endpoint a named key is still sent, and the environment's Authorization never is."""
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", f"X-Team-Secret: {SECRET}\nAuthorization: Bearer {SECRET}-env")
    monkeypatch.setenv("VERITUNE_TEST_LLM_KEY", SECRET)
    extra = ["--llm-api-key-env", "VERITUNE_TEST_LLM_KEY"] if named_key else []
    with FakeChatServer(responder) as server:
        assert main(build_finer(tmp_path, server.base_url, *extra)) == 0
    assert server.headers
    for headers in server.headers:
        assert "x-team-secret" not in {name.lower() for name in headers}
        assert headers.get("Authorization") == (f"Bearer {SECRET}" if named_key else None)
    official = ChatClient("https://api.openai.com/v1", "gpt-4o", cache_path=tmp_path / "o.sqlite")._openai_client()
    assert official.default_headers["X-Team-Secret"] == SECRET
