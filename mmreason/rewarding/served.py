"""Calling a served model's OpenAI-compatible chat API from a reward, within limits: ``ChatEndpoint``.

Any server that answers ``POST {base_url}/chat/completions`` as OpenAI does (``vllm serve``, SGLang, a hosted
API). One ``ChatEndpoint`` per (base_url, model, limits), shared by every call of the reward in the process
(``endpoint``), so that the runner's sample-by-sample retry of a failed batch shares the limits and cache too:

- **concurrency cap**: at most ``max_concurrency`` requests in flight (a semaphore per event loop; the runner
  awaits one reward call at a time, so this is the process's cap);
- **rate limit**: request starts spaced ``1 / requests_per_second`` apart, over every event loop and thread;
- **retries**: a connection error, a timeout, or HTTP 408 / 409 / 429 / 5xx is retried up to ``max_retries``
  times after ``backoff_s * 2**attempt`` seconds (at most ``max_backoff_s``; a ``Retry-After`` of seconds
  is honoured within the same cap); other 4xx answers (a bad key, an unknown model) fail at once;
- **per-sample timeout**: ``timeout_s`` bounds one sample's whole call, retries and waits included;
- **cache**: the verdict of an identical request (same endpoint, model, messages and options) is reused
  (least recently used out past ``cache_size``); failures are not cached.

The key is read from the environment variable the config names, at call time, sent as a bearer token and never
written anywhere: error messages carry the status and at most 200 characters of the answer, with the key
struck out should the server echo it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmreason.rewarding.calling import RewardConfigError

if TYPE_CHECKING:
    import httpx2

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
FAILURE_KEPT_S = 30.0  # the runner retries a failed batch's samples right after it
MAX_REPLY_BYTES = 1 << 20  # a chat completion's JSON; a larger answer is not one


class ServedCallError(RuntimeError):
    """A served model's call failed: an HTTP error, a malformed answer, retries spent or the time up."""


@dataclass(frozen=True)
class EndpointConfig:
    """Where the served model is and the limits of calling it (the reward's kwargs of the same names)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    max_concurrency: int = 8
    requests_per_second: float = 0.0  # 0: no rate limit
    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 60.0
    cache_size: int = 10_000

    def check(self) -> None:
        """One line naming the kwarg for a value out of range (``RewardConfigError``: the run stops at once)."""
        if not self.base_url.startswith(("http://", "https://")):
            raise RewardConfigError(f"base_url {self.base_url!r} is not an http:// or https:// URL")
        if not self.model:
            raise RewardConfigError("model is empty: name the served model (its id in GET /v1/models)")
        limits = {
            "max_concurrency": self.max_concurrency >= 1,
            "requests_per_second": self.requests_per_second >= 0,
            "max_retries": self.max_retries >= 0,
            "backoff_s": self.backoff_s >= 0,
            "max_backoff_s": self.max_backoff_s >= 0,
            "timeout_s": self.timeout_s > 0,
            "cache_size": self.cache_size >= 0,
        }
        for name, ok in limits.items():
            if not ok:
                raise RewardConfigError(f"{name}={getattr(self, name)!r} is out of range")
        if self.api_key_env is not None and self.api_key_env not in os.environ:
            raise RewardConfigError(f"api_key_env: the environment variable {self.api_key_env!r} is not set")


@dataclass(frozen=True)
class Attempt:
    """One request's outcome: the reply text, or the error, whether to retry and the server's Retry-After."""

    reply: str | None = None
    error: str = ""
    retryable: bool = False
    retry_after: float = 0.0


class RateLimiter:
    """Request starts at least ``1 / per_second`` seconds apart, whichever event loop or thread asks."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second if per_second > 0 else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


class ChatEndpoint:
    """``await endpoint.complete(messages, options)`` -> the reply's text, within the limits above."""

    def __init__(self, config: EndpointConfig) -> None:
        self.config = config
        self.limiter = RateLimiter(config.requests_per_second)
        self._semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._failed: dict[str, tuple[float, str]] = {}  # key -> (when, error) of a batch's failed calls
        self._lock = threading.Lock()
        self.requests = 0  # HTTP requests sent (retries included), for the logs and the tests

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            if loop not in self._semaphores:
                self._semaphores[loop] = asyncio.Semaphore(self.config.max_concurrency)
            return self._semaphores[loop]

    @staticmethod
    def cache_key(body: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=True).encode()).hexdigest()

    def cached(self, key: str) -> str | None:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        return None

    def remember(self, key: str, reply: str) -> None:
        if not self.config.cache_size:
            return
        with self._lock:
            self._cache[key] = reply
            self._cache.move_to_end(key)
            while len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)

    def body(self, messages: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
        return {**options, "model": self.config.model, "messages": messages}

    async def complete(
        self,
        client: httpx2.AsyncClient,
        messages: list[dict[str, Any]],
        options: dict[str, Any],
        *,
        keep_failure: bool = False,
    ) -> str:
        """The reply text of one chat completion (cached, capped, rate-limited, retried, timed out).

        ``keep_failure``: a failure is also kept for ``FAILURE_KEPT_S`` seconds, and the next identical call
        within them raises it again at once. A reward scoring a batch sets it, so that the runner's retry of the
        batch's failed samples one by one (which counts each failure under ``max_reward_errors``) does not
        send their requests, retries and waits all over again."""
        body = self.body(messages, options)
        key = self.cache_key({"url": self.config.base_url, **body})
        hit = self.cached(key)
        if hit is not None:
            return hit
        with self._lock:
            kept = self._failed.pop(key, None)
        if kept is not None and time.monotonic() - kept[0] < FAILURE_KEPT_S:
            raise ServedCallError(kept[1])
        try:
            reply = await asyncio.wait_for(self._with_retries(client, body), self.config.timeout_s)
        except (asyncio.TimeoutError, ServedCallError) as exc:
            error = str(exc) or f"no answer within timeout_s={self.config.timeout_s:g} s"
            if keep_failure:
                now = time.monotonic()
                with self._lock:
                    self._failed = {k: v for k, v in self._failed.items() if now - v[0] < FAILURE_KEPT_S}
                    self._failed[key] = (now, error)
            raise ServedCallError(error) from None
        self.remember(key, reply)
        return reply

    async def _with_retries(self, client: httpx2.AsyncClient, body: dict[str, Any]) -> str:
        cfg = self.config
        for attempt in range(cfg.max_retries + 1):
            async with self._semaphore():
                await self.limiter.wait()
                result = await self._post(client, body)
            if result.reply is not None:
                return result.reply
            if not result.retryable or attempt == cfg.max_retries:
                raise ServedCallError(result.error + (f" (after {attempt + 1} attempts)" if attempt else ""))
            await asyncio.sleep(min(cfg.max_backoff_s, max(result.retry_after, cfg.backoff_s * 2**attempt)))
        raise AssertionError("unreachable")

    async def _post(self, client: httpx2.AsyncClient, body: dict[str, Any]) -> Attempt:
        """One request: its reply text, or its error and whether (and after how long at least) to retry."""
        import httpx2

        url = self.config.base_url.rstrip("/") + "/chat/completions"
        self.requests += 1
        try:
            response = await client.post(url, json=body, headers=self._headers())
        except httpx2.TransportError as exc:  # connection refused or reset, read timeout, ...
            return Attempt(error=f"{type(exc).__name__} calling {url}", retryable=True)
        if response.status_code != 200:
            error = f"{url} answered HTTP {response.status_code}: {self._redact(response.text[:200])!r}"
            after = response.headers.get("retry-after", "")
            wait = float(after) if after.replace(".", "", 1).isdigit() else 0.0
            return Attempt(error=error, retryable=response.status_code in RETRY_STATUS, retry_after=wait)
        return Attempt(reply=self._reply_text(response.content, url))

    def _reply_text(self, raw: bytes, url: str) -> str:
        if len(raw) > MAX_REPLY_BYTES:
            raise ServedCallError(f"{url}: the answer is {len(raw):,} bytes, over {MAX_REPLY_BYTES:,}")
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ServedCallError(f"{url}: the answer is not a chat completion") from None
        if not isinstance(content, str):
            raise ServedCallError(f"{url}: the answer's message content is not text")
        return content

    def _key(self) -> str | None:
        name = self.config.api_key_env
        return os.environ.get(name) if name else None

    def _headers(self) -> dict[str, str]:
        key = self._key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _redact(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "***") if key else text


_ENDPOINTS: dict[EndpointConfig, ChatEndpoint] = {}
_ENDPOINTS_LOCK = threading.Lock()


def endpoint(config: EndpointConfig) -> ChatEndpoint:
    """The process's ``ChatEndpoint`` for ``config`` (made, and ``config`` checked, on first use)."""
    with _ENDPOINTS_LOCK:
        if config not in _ENDPOINTS:
            config.check()
            _ENDPOINTS[config] = ChatEndpoint(config)
        return _ENDPOINTS[config]


def http_client(config: EndpointConfig) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for one reward call (its connections live on the call's event loop)."""
    import httpx2

    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(config.timeout_s),
        limits=httpx2.Limits(max_connections=config.max_concurrency),
        follow_redirects=False,
        trust_env=True,
    )
