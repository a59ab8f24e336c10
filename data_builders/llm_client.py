"""A cached, concurrent client for any OpenAI-compatible chat-completions endpoint (vLLM, OpenAI, ...).

Every builder and judge that asks an LLM goes through :class:`ChatClient`:

- the API key is read from an environment variable only (never logged, never cached);
- every answer is stored in SQLite keyed by the full request (model, messages, sampling settings), so an
  interrupted build resumes and a rerun sends no request that was already answered;
- requests run on a bounded thread pool (identical prompts in one batch are sent once); timeouts,
  connection errors, malformed bodies, 408/429 and every 5xx are retried with exponential backoff (a
  ``Retry-After`` header, when larger, is honoured); an endpoint still failing after the retries is a
  one-line :class:`~veritune.errors.UserError`, and the answers received before it stay cached.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import sqlite3
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from veritune.errors import UserError

Prompt = str | list[dict[str, Any]]
RETRYABLE_STATUS = {408, 409, 429}  # plus every 5xx
MAX_RETRY_AFTER = 120.0  # seconds: a longer Retry-After is capped


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
        self.url = base_url.rstrip("/") + "/chat/completions"
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
        self._lock = threading.Lock()
        self._stop = threading.Event()
        cache_path = Path(cache_path)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(cache_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, answer TEXT)")

    # ---- public API

    def complete(self, prompt: Prompt, *, system: str | None = None) -> str:
        """The answer to one prompt (a user message string, or a list of chat messages)."""
        payload = self._payload(prompt, system)
        return self._answer(self._key(payload), payload)

    def complete_many(self, prompts: list[Prompt], *, system: str | None = None, desc: str = "LLM") -> list[str]:
        """Answers to ``prompts`` in order, ``concurrency`` requests at a time, with a progress bar.

        A prompt repeated in the batch is sent once (the repeats count as cache hits).
        """
        payloads = [self._payload(prompt, system) for prompt in prompts]
        keys = [self._key(payload) for payload in payloads]
        unique = dict(zip(keys, payloads))  # first payload per key, in order
        with self._lock:
            self.cache_hits += len(keys) - len(unique)
        found: dict[str, str] = {}
        self._stop.clear()
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        try:
            with tqdm(total=len(unique), desc=desc, unit="req", disable=not unique) as bar:
                futures = {key: pool.submit(self._answer, key, payload) for key, payload in unique.items()}
                for key, future in futures.items():
                    found[key] = future.result()
                    bar.update(1)
        except BaseException:
            # One request out of retries (or Ctrl-C) ends the batch: nothing more is sent, answers so far stay cached.
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return [found[key] for key in keys]

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

    def _answer(self, key: str, payload: dict[str, Any]) -> str:
        cached = self._cached(key)
        if cached is not None:
            with self._lock:
                self.cache_hits += 1
            return cached
        answer = self._request(payload)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?)", (key, self.model, answer))
        return answer

    def _cached(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _request(self, payload: dict[str, Any]) -> str:
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        api_key = os.environ.get(self.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        last_error, wait = "no attempt made", 0.0
        for attempt in range(self.max_retries + 1):
            if attempt and self._stop.wait(max(wait, self.backoff * 2 ** (attempt - 1))):
                break
            wait = 0.0
            with self._lock:
                self.requests_sent += 1
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    data = json.loads(response.read().decode("utf-8"))
                content = data["choices"][0]["message"]["content"]
                if not isinstance(content, str):
                    raise TypeError("message content is not text")
                return content
            except urllib.error.HTTPError as err:
                last_error = f"HTTP {err.code}"
                if err.code not in RETRYABLE_STATUS and err.code < 500:
                    hint = f" (check the API key in ${self.api_key_env})" if err.code in (401, 403) else ""
                    raise UserError(f"LLM endpoint {self.url} refused the request: HTTP {err.code}{hint}") from None
                wait = _retry_after(err.headers.get("Retry-After") if err.headers else None)
            except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as err:
                last_error = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            except (ValueError, KeyError, IndexError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                last_error = f"malformed response ({type(err).__name__})"
        raise UserError(
            f"LLM endpoint {self.url} unreachable after {self.max_retries + 1} attempts ({last_error}); "
            "answers received so far are cached, rerun to resume"
        )


def _retry_after(value: str | None) -> float:
    """Seconds from a ``Retry-After`` header (delta-seconds form; an HTTP date or junk counts as 0), capped."""
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER) if value else 0.0
    except ValueError:
        return 0.0
