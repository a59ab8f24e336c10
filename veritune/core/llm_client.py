"""A cached, concurrent client for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp
server, TGI, OpenAI, ...), built on the ``openai`` package's async client.

Every builder and judge that asks an LLM goes through :class:`ChatClient`:

- the API key is read from an environment variable only (never logged, never cached);
- every answer is stored in SQLite keyed by the full request (model, messages, sampling settings), so an
  interrupted build resumes and a rerun sends no request that was already answered;
- requests run concurrently on one event loop, at most ``concurrency`` in flight (identical prompts in one
  batch are sent once); timeouts, connection errors, malformed bodies, 408/409/429 and every 5xx are
  retried with exponential backoff (a ``Retry-After`` header, when larger, is honoured). The retry loop is
  ours rather than the ``openai`` client's so that malformed 200 answers are retried too and every
  attempt is counted; the errors are the ``openai`` package's typed ones.
- an endpoint still failing after the retries is one :class:`~veritune.core.errors.UserError` line saying what
  happened (the HTTP status and the start of the body when the server answered; the API-key variable to
  check on 401/403), and the answers received before it stay cached.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from veritune.core.errors import UserError
from veritune.core.progress import progress_bar

Prompt = str | list[dict[str, Any]]
RETRYABLE_STATUS = {408, 409, 429}  # plus every 5xx
MAX_RETRY_AFTER = 120.0  # seconds: a longer Retry-After is capped
SNIPPET_CHARS = 160


PROBE_PROMPT = "Answer with one word: is this a test?"  # ChatClient.check_endpoint's request (never cached)


class ChatClient:
    """Chat completions with an on-disk answer cache.

    Args:
        base_url: the endpoint root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the model name sent with each request (and part of the cache key).
        cache_path: SQLite file holding answered requests.
        api_key_env: environment variable holding the API key (may be unset for local servers).
        concurrency: requests in flight at once in :meth:`complete_many`.
        max_retries: retries after the first attempt for retryable failures.
        timeout: seconds per request.
        temperature: sampling temperature (0: deterministic answers, as the builders' protocols ask).
        max_tokens: generation budget per answer (None: the server's default).
        backoff: first retry delay in seconds, doubled after each failure.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        cache_path: str | Path,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        max_retries: int = 5,
        timeout: float = 60.0,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        backoff: float = 1.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency = max(1, concurrency)
        self.max_retries = max_retries
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.backoff = backoff
        self.requests_sent = 0
        self.cache_hits = 0
        cache_path = Path(cache_path)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(cache_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, answer TEXT)")

    # ---- public API

    def complete(self, prompt: Prompt, *, system: str | None = None) -> str:
        """The answer to one prompt (a user message string, or a list of chat messages)."""
        payload = self._payload(prompt, system)
        key = self._key(payload)
        cached = self._cached(key)
        if cached is not None:
            self.cache_hits += 1
            return cached
        return _run(self._send_all({key: payload}, bar=None))[key]

    def complete_many(self, prompts: list[Prompt], *, system: str | None = None, desc: str = "LLM") -> list[str]:
        """Answers to ``prompts`` in order, ``concurrency`` requests at a time, with a progress bar.

        A prompt repeated in the batch is sent once (the repeats count as cache hits). When one request runs
        out of retries the batch stops at once (nothing more is sent) and the answers so far stay cached.
        """
        payloads = [self._payload(prompt, system) for prompt in prompts]
        keys = [self._key(payload) for payload in payloads]
        unique = dict(zip(keys, payloads))  # first payload per key, in order
        self.cache_hits += len(keys) - len(unique)
        found: dict[str, str] = {}
        for key in list(unique):
            cached = self._cached(key)
            if cached is not None:
                found[key] = cached
                self.cache_hits += 1
                del unique[key]
        if unique:
            with progress_bar(total=len(found) + len(unique), initial=len(found), desc=desc, unit="req") as bar:
                found.update(_run(self._send_all(unique, bar=bar)))
        return [found[key] for key in keys]

    def check_endpoint(self) -> None:
        """Send one short request, uncached and uncounted, before a build that needs the endpoint starts, so a
        server that is down, slow, refuses the key or answers no chat completion is the error, not the output.

        Raises:
            UserError: naming the endpoint and what it answered (after this client's retries).
        """
        payload = self._payload(PROBE_PROMPT, None)

        async def probe() -> str:
            import openai

            api_key = os.environ.get(self.api_key_env) or None
            async with openai.AsyncOpenAI(
                base_url=self.base_url, api_key=api_key or "no-key", max_retries=0, timeout=self.timeout
            ) as client:
                return await self._request(client, payload, api_key)

        sent = self.requests_sent
        try:
            _run(probe())
        except UserError as err:
            reason = str(err).replace("; answers received so far are cached, rerun to resume", "")
            raise UserError(f"{reason} (checked before building: nothing was written)") from None
        finally:
            self.requests_sent = sent

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the cache database."""
        self._db.close()

    # ---- internals

    def _payload(self, prompt: Prompt, system: str | None) -> dict[str, Any]:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if system is not None:
            messages = [{"role": "system", "content": system}, *messages]
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        return payload

    @staticmethod
    def _key(payload: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def _cached(self, key: str) -> str | None:
        row = self._db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    async def _send_all(self, payloads: dict[str, dict[str, Any]], bar: Any | None) -> dict[str, str]:
        """Send ``payloads`` (none cached), at most ``concurrency`` at once; each answer is cached as it arrives."""
        import openai

        api_key = os.environ.get(self.api_key_env) or None
        found: dict[str, str] = {}
        limit = asyncio.Semaphore(self.concurrency)
        # max_retries=0: the retry loop is ours (see the module docstring). A local server needs no key: then no
        # Authorization header is sent (the placeholder is omitted) and OPENAI_API_KEY is not picked up behind our back.
        async with openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key or "no-key", max_retries=0, timeout=self.timeout
        ) as client:

            async def one(key: str, payload: dict[str, Any]) -> tuple[str, str]:
                async with limit:
                    return key, await self._request(client, payload, api_key)

            tasks = [asyncio.create_task(one(key, payload)) for key, payload in payloads.items()]
            try:
                for next_done in asyncio.as_completed(tasks):
                    key, answer = await next_done
                    self._db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?)", (key, self.model, answer))
                    found[key] = answer
                    if bar is not None:
                        bar.update(1)
            finally:  # one request out of retries (or Ctrl-C) ends the batch: nothing more is sent
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return found

    async def _request(self, client: Any, payload: dict[str, Any], api_key: str | None) -> str:
        import openai

        options = {key: value for key, value in payload.items() if key not in ("model", "messages")}
        failure, wait = "no attempt made", 0.0
        answered = False  # did the server answer at all (then say what it answered, not "unreachable")
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(max(wait, self.backoff * 2 ** (attempt - 1)))
            wait = 0.0
            self.requests_sent += 1
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=payload["model"],
                    messages=payload["messages"],
                    **options,
                    extra_headers=None if api_key else {"Authorization": openai.omit},
                )
            except openai.APIStatusError as err:
                answered = True
                failure = f"HTTP {err.status_code}: {_snippet(err.response.text, api_key)}"
                if err.status_code not in RETRYABLE_STATUS and err.status_code < 500:
                    hint = f" (check the API key in ${self.api_key_env})" if err.status_code in (401, 403) else ""
                    raise UserError(
                        f"LLM endpoint {self.url} refused the request: HTTP {err.status_code}{hint}: "
                        f"{_snippet(err.response.text, api_key)}"
                    ) from None
                wait = _retry_after(err.response.headers)
                continue
            except openai.APIConnectionError as err:  # includes APITimeoutError
                cause = err.__cause__ or err
                failure = f"{type(err).__name__}: {cause}" if str(cause) else type(err).__name__
                continue
            text = raw.http_response.text
            try:
                content = json.loads(text)["choices"][0]["message"]["content"]
                if not isinstance(content, str):
                    raise TypeError("message content is not text")
                return content
            except (ValueError, KeyError, IndexError, TypeError) as err:  # JSONDecodeError is a ValueError
                answered = True
                failure = (
                    f"HTTP {raw.http_response.status_code} without an answer ({type(err).__name__}): "
                    f"{_snippet(text, api_key)}"
                )
        attempts = self.max_retries + 1
        if answered:
            raise UserError(
                f"LLM endpoint {self.url} failed after {attempts} attempts: the server answered {failure}; "
                "answers received so far are cached, rerun to resume"
            )
        raise UserError(
            f"LLM endpoint {self.url} unreachable after {attempts} attempts ({failure}); "
            "answers received so far are cached, rerun to resume"
        )


def _run(coroutine: Any) -> Any:
    """Run ``coroutine`` to completion, also from code that already runs inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _snippet(text: str, secret: str | None = None) -> str:
    """The start of a response body on one line (HTML tags dropped), never showing the API key."""
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", text or "")).strip()
    if secret:
        flat = flat.replace(secret, "***")
    if not flat:
        return "(empty body)"
    return repr(flat[:SNIPPET_CHARS] + ("..." if len(flat) > SNIPPET_CHARS else ""))


def _retry_after(headers: Any) -> float:
    """Seconds from ``Retry-After-Ms`` or ``Retry-After`` (delta seconds; an HTTP date or junk counts as 0), capped."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name) if headers is not None else None
        if value:
            try:
                return min(max(float(value) / scale, 0.0), MAX_RETRY_AFTER)
            except ValueError:
                continue
    return 0.0
