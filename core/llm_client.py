"""A cached, concurrent client for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp
server, TGI, OpenAI, ...), built on the ``openai`` package's client.

Every builder and judge that asks an LLM goes through :class:`ChatClient`:

- the API key is read from an environment variable only (never logged, never cached), and only one the caller
  names (``api_key_env``); without one, ``OPENAI_API_KEY`` is sent to the official OpenAI endpoint
  (:data:`OPENAI_ENDPOINT`'s host over https) and no key anywhere else. A key (or userinfo in the URL) is refused
  for plain http to a host other than this machine's loopback;
- the endpoint is printed and recorded as :func:`public_url` gives it (no userinfo, query or fragment);
- every answer is stored in SQLite keyed by the endpoint and the full request (model, messages, sampling
  settings), so an interrupted build resumes, a rerun sends no request that was already answered, and another
  server's answers under the same model name are never reused;
- requests run concurrently on a pool of ``concurrency`` threads sharing one ``openai.OpenAI`` client and its
  connection pool (identical prompts in one batch are sent once). The payload, already a plain JSON body, is
  posted as it is (``client.post``) rather than through ``chat.completions.create``, whose per-request
  validation and parameter transforms cost more CPU than the request itself against a fast local server
  (docs/PERFORMANCE.md, the judge client); timeouts, connection errors, malformed bodies, 408/409/429 and every 5xx are
  retried with exponential backoff (a ``Retry-After`` header, when larger, is honoured). The retry loop is
  ours rather than the ``openai`` client's so that malformed 200 answers are retried too and every
  attempt is counted; the errors are the ``openai`` package's typed ones.
- an endpoint still failing after the retries is one :class:`~core.errors.UserError` line saying what
  happened (the HTTP status and the start of the body when the server answered; the API-key variable to
  check on 401/403), and the answers received before it stay cached.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import ipaddress
import json
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from core.errors import UserError
from core.progress import progress_bar

Prompt = str | list[dict[str, Any]]
RETRYABLE_STATUS = {408, 409, 429}  # plus every 5xx
MAX_RETRY_AFTER = 120.0  # seconds: a longer Retry-After is capped
SNIPPET_CHARS = 160


PROBE_PROMPT = "Answer with one word: is this a test?"  # ChatClient.check_endpoint's request (never cached)
OPENAI_ENDPOINT = "https://api.openai.com/v1"  # the endpoint OPENAI_API_KEY is sent to without api_key_env
OPENAI_KEY_ENV = "OPENAI_API_KEY"


def public_url(url: str) -> str:
    """``url`` as it is printed and recorded: without userinfo, query string or fragment (and no trailing ``/``)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # e.g. an unclosed IPv6 bracket: not a URL, but still shown without its secrets
        return url.strip().split("?")[0].split("#")[0].rpartition("@")[2].rstrip("/")
    host = parts.netloc.rpartition("@")[2].lower()
    text = urlunsplit((parts.scheme.lower(), host, parts.path, "", ""))
    return (text if host else text.rpartition("@")[2]).rstrip("/")  # no host: not a URL, but still no userinfo


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_openai(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme.lower() == "https" and parts.hostname == urlsplit(OPENAI_ENDPOINT).hostname
    except ValueError:  # not a URL: refused by ChatClient._check_url
        return False


def _environment_header_names() -> list[str]:
    """The header names in OPENAI_CUSTOM_HEADERS, read as the openai client reads it (``Name: value`` lines)."""
    lines = os.environ.get("OPENAI_CUSTOM_HEADERS", "").split("\n")
    return [line.partition(":")[0].strip() for line in lines if ":" in line]


class ChatClient:
    """Chat completions with an on-disk answer cache.

    Args:
        base_url: the endpoint root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the model name sent with each request (and part of the cache key).
        cache_path: SQLite file holding answered requests.
        api_key_env: environment variable holding the API key sent to ``base_url`` (None: ``OPENAI_API_KEY`` for
            the official OpenAI endpoint, no key for any other).
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
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 5,
        timeout: float = 60.0,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        backoff: float = 1.0,
    ) -> None:
        self.base_url = base_url.strip().rstrip("/")
        self.endpoint = public_url(self.base_url)  # what is printed, recorded and part of the cache key
        self.url = self.endpoint + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env or (OPENAI_KEY_ENV if _is_openai(self.base_url) else None)
        self._check_url()
        self.concurrency = max(1, concurrency)
        self.max_retries = max_retries
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.backoff = backoff
        self.requests_sent = 0
        self.cache_hits = 0
        self._count_lock = threading.Lock()
        cache_path = Path(cache_path)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(cache_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # each answer is committed as it arrives; in WAL mode NORMAL syncs at checkpoints rather than at every
        # commit, so a killed build keeps its answers (only a power cut can lose the last few), and caching
        # an answer no longer costs more than receiving it
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, answer TEXT, endpoint TEXT)"
        )
        if "endpoint" not in {row[1] for row in self._db.execute("PRAGMA table_info(answers)")}:
            try:  # an older cache's table: its rows' keys hold no endpoint and match no request
                self._db.execute("ALTER TABLE answers ADD COLUMN endpoint TEXT")
            except sqlite3.OperationalError:  # another process added it first
                pass
        self._probe_pending = False  # check_endpoint() deferred its probe to the first cache miss
        self._probe_lock = threading.Lock()

    # ---- public API

    def complete(self, prompt: Prompt, *, system: str | None = None) -> str:
        """The answer to one prompt (a user message string, or a list of chat messages)."""
        payload = self._payload(prompt, system)
        key = self._key(payload)
        cached = self._cached(key)
        if cached is not None:
            self.cache_hits += 1
            return cached
        return self._send_all({key: payload}, bar=None)[key]

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
                found.update(self._send_all(unique, bar=bar))
        return [found[key] for key in keys]

    def check_endpoint(self, when: str = "checked before building: nothing was written") -> None:
        """Make sure the endpoint answers before this client sends its first request, so a server that is
        down, slow, refuses the key or answers no chat completion is the error, not the output.

        The probe is one short request, uncached and uncounted, sent at most once, and only when the client
        has a request to send: with answers of this model and endpoint already in the cache (a rebuild) it
        waits for the first cache miss, so a build whose answers are all cached runs with the endpoint
        offline. A cache without any answer of this model from this endpoint misses on every request: the
        endpoint is then probed at once, before the build starts (and before it writes anything).

        Raises:
            UserError: naming the endpoint and what it answered (after this client's retries), then ``when``.
        """
        query = "SELECT 1 FROM answers WHERE model = ? AND endpoint = ? LIMIT 1"
        if self._db.execute(query, (self.model, self.endpoint)).fetchone():
            self._probe_pending = True
            return
        self._probe(when)

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

    def _key(self, payload: dict[str, Any]) -> str:
        request = {"endpoint": self.endpoint, "payload": payload}
        return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def _check_url(self) -> None:
        """One UserError line for a URL that is not http(s), or that would send a credential over plain http to
        another machine."""
        try:
            parts = urlsplit(self.base_url)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError as err:
            raise UserError(f"LLM endpoint {self.endpoint}: not a valid URL ({err})") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise UserError(f"LLM endpoint {self.endpoint}: expected an http:// or https:// URL with a host")
        if parts.scheme.lower() == "https" or _is_loopback(parts.hostname):
            return
        if parts.username or parts.password:
            raise UserError(
                f"LLM endpoint {self.endpoint}: refusing to send the URL's user and password over plain http to "
                f"{parts.hostname}; use https, or a loopback address (e.g. an SSH tunnel)"
            )
        if self._api_key():
            raise UserError(
                f"LLM endpoint {self.endpoint}: refusing to send the API key in ${self.api_key_env} over plain "
                f"http to {parts.hostname}; use https, or a loopback address (e.g. an SSH tunnel)"
            )

    def _api_key(self) -> str | None:
        """The key to send (None: no Authorization header)."""
        return (os.environ.get(self.api_key_env) or None) if self.api_key_env else None

    def _cached(self, key: str) -> str | None:
        row = self._db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _probe(self, when: str) -> None:
        """Send the probe request (uncached, uncounted); a failure is one UserError line ending in ``when``."""
        payload = self._payload(PROBE_PROMPT, None)
        sent = self.requests_sent
        try:
            with self._openai_client() as client:
                self._request(client, payload, threading.Event())
        except UserError as err:
            reason = str(err).replace("; answers received so far are cached, rerun to resume", "")
            raise UserError(f"{reason} ({when})") from None
        finally:
            self.requests_sent = sent

    def _openai_client(self) -> Any:
        """An ``openai.OpenAI`` client for this endpoint. max_retries=0: the retry loop is ours (see the module
        docstring). A local server needs no key: the placeholder is then never sent (see ``_request``), and
        OPENAI_API_KEY is not picked up behind our back. The client also reads OPENAI_ORG_ID, OPENAI_PROJECT_ID and
        OPENAI_CUSTOM_HEADERS (``Name: value`` lines, an Authorization among them) from the environment and sends
        them as headers on every request; like the key, they are for OpenAI's own endpoint, so another endpoint gets
        none of them (an explicit header set to ``omit`` outranks the environment's)."""
        import openai

        api_key = self._api_key()
        official = _is_openai(self.base_url)
        headers: dict[str, Any] = {}
        if not official:
            headers = {name: openai.omit for name in _environment_header_names()}
            if api_key and any(name.lower() == "authorization" for name in headers):  # the named key, not the env's
                headers = {name: v for name, v in headers.items() if name.lower() != "authorization"}
                headers["Authorization"] = f"Bearer {api_key}"
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or "no-key",
            max_retries=0,
            timeout=self.timeout,
            default_headers=headers or None,
        )
        if not official:
            client.organization = client.project = None
        return client

    def _send_all(self, payloads: dict[str, dict[str, Any]], bar: Any | None) -> dict[str, str]:
        """Send ``payloads`` (none cached), at most ``concurrency`` at once; each answer is cached as it arrives."""
        if self._probe_pending:  # the first cache miss after check_endpoint(): probe once, before sending
            with self._probe_lock:
                if self._probe_pending:
                    self._probe("checked before the first request not answered by the cache")
                    self._probe_pending = False
        found: dict[str, str] = {}
        stop = threading.Event()  # set when the batch ends early: requests in flight make no further attempt
        with self._openai_client() as client:
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(self.concurrency, len(payloads)))
            try:
                futures = {pool.submit(self._request, client, payload, stop): key for key, payload in payloads.items()}
                for future in concurrent.futures.as_completed(futures):
                    key, answer = futures[future], future.result()
                    self._db.execute(
                        "INSERT OR REPLACE INTO answers (key, model, answer, endpoint) VALUES (?, ?, ?, ?)",
                        (key, self.model, answer, self.endpoint),
                    )
                    found[key] = answer
                    if bar is not None:
                        bar.update(1)
            finally:  # one request out of retries (or Ctrl-C) ends the batch: nothing more is sent
                stop.set()
                pool.shutdown(wait=False, cancel_futures=True)
        return found

    def _request(self, client: Any, payload: dict[str, Any], stop: threading.Event) -> str:
        import httpx
        import openai

        api_key = self._api_key()
        headers = {} if api_key else {"Authorization": openai.omit}
        failure, wait = "no attempt made", 0.0
        answered = False  # did the server answer at all (then say what it answered, not "unreachable")
        for attempt in range(self.max_retries + 1):
            if attempt and stop.wait(max(wait, self.backoff * 2 ** (attempt - 1))):
                break  # the batch has ended: no further attempt
            wait = 0.0
            with self._count_lock:
                self.requests_sent += 1
            try:
                response = client.post(
                    "/chat/completions", body=payload, cast_to=httpx.Response, options={"headers": headers}
                )
            except openai.APIStatusError as err:
                answered = True
                failure = f"HTTP {err.status_code}: {_snippet(err.response.text, api_key)}"
                if err.status_code not in RETRYABLE_STATUS and err.status_code < 500:
                    hint = ""
                    if err.status_code in (401, 403):
                        hint = (
                            f" (check the API key in ${self.api_key_env})"
                            if self.api_key_env
                            else " (no API key was sent: name its environment variable with --llm-api-key-env)"
                        )
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
            text = response.text
            try:
                content = json.loads(text)["choices"][0]["message"]["content"]
                if not isinstance(content, str):
                    raise TypeError("message content is not text")
                return content
            except (ValueError, KeyError, IndexError, TypeError) as err:  # JSONDecodeError is a ValueError
                answered = True
                failure = (
                    f"HTTP {response.status_code} without an answer ({type(err).__name__}): {_snippet(text, api_key)}"
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
