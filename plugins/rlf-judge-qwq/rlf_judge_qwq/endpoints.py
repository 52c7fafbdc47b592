"""The judge over OpenAI-compatible chat endpoints: vLLM servers, or verl's reward router.

Requests are balanced over the endpoints (fewest in flight, or round robin), limited to
``concurrency`` in flight at once, and retried with exponential backoff and jitter on another endpoint
when one fails (connection refused, timeout, 408, 429, 5xx, an answer that is not a chat completion).
An endpoint that refused a connection is skipped for a while. Other HTTP errors (400: prompt too long,
404: wrong model name) fail at once: retrying cannot fix them.

Pooled connections and the semaphore belong to one event loop. A run has one, but verl's reward
workers and scripts may call a judge from another, so both are made again whenever the loop changes.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx

from rlf_judge_qwq.metrics import JudgeMetrics
from rlf_judge_qwq.settings import JudgeSettings

CONNECTIONS_PER_CLIENT = 8


class JudgeRequestError(RuntimeError):
    """A judge request failed for good; ``kind`` names the last failure (``timeout``, ``http_400``...)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Completion:
    """The judge's answer: its text (reasoning included unless the server split it off)."""

    content: str | None
    finish_reason: str | None


@dataclass
class Endpoint:
    url: str
    in_flight: int = 0
    down_until: float = 0.0


class _LoopState:
    def __init__(self, loop: asyncio.AbstractEventLoop, concurrency: int):
        self.loop = loop
        self.semaphore = asyncio.Semaphore(concurrency)
        self.clients: dict[str, list[_Client]] = {}


@dataclass
class _Client:
    http: httpx.AsyncClient
    in_flight: int = 0


class ChatEndpoints:
    """POSTs ``{endpoint}/chat/completions``; see the module docstring for balancing and retries."""

    def __init__(self, settings: JudgeSettings, metrics: JudgeMetrics, rng: random.Random | None = None):
        if not settings.endpoints:
            raise ValueError("judge-qwq: backend 'openai' needs at least one URL in endpoints")
        self.settings = settings
        self.metrics = metrics
        self.endpoints = [Endpoint(u.rstrip("/")) for u in settings.endpoints]
        self._rng = rng or random.Random()
        self._turn = 0
        self._state: _LoopState | None = None
        self._tls: ssl.SSLContext | None = None

    async def complete(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Completion:
        body = {"model": self.settings.model, "messages": messages, **params}
        s = self.settings
        tried: set[str] = set()
        last = ""
        kind = "connect"
        for attempt in range(s.retries + 1):
            if attempt:
                self.metrics.retries += 1
                await asyncio.sleep(self._backoff(attempt))
            try:
                return await self._post(body, tried)
            except JudgeRequestError as exc:
                last, kind = str(exc), exc.kind
                if not _retryable(kind):
                    raise
        raise JudgeRequestError(f"judge request failed after {s.retries + 1} attempts; last: {last}", kind)

    async def aclose(self) -> None:
        """Close the connection pools of the running loop; later calls open new ones."""
        state, self._state = self._state, None
        if state is not None and state.loop is asyncio.get_running_loop():
            await asyncio.gather(*(c.http.aclose() for shards in state.clients.values() for c in shards))

    # --- internals -------------------------------------------------------------------------------

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _LoopState(loop, self.settings.concurrency)
        return self._state

    def _client(self, state: _LoopState, url: str) -> _Client:
        """The endpoint's least busy client. httpx's pool does work quadratic in its connections on
        every request, so connections are spread over clients of at most ``CONNECTIONS_PER_CLIENT``
        each, a new one opened only when all are full (at 64 in flight: several times the
        throughput of a single client on the benchmark machine)."""
        shards = state.clients.setdefault(url, [])
        size = min(self.settings.concurrency, CONNECTIONS_PER_CLIENT)
        least = min(shards, key=lambda c: c.in_flight, default=None)
        if least is not None and (least.in_flight < size or len(shards) * size >= self.settings.concurrency):
            return least
        s = self.settings
        if self._tls is None:  # building one costs ~0.1 s: share it between clients and loops
            self._tls = httpx.create_ssl_context()
        client = _Client(
            httpx.AsyncClient(
                base_url=url,
                headers={"Authorization": f"Bearer {s.api_key}"} if s.api_key else {},
                timeout=httpx.Timeout(s.timeout_s, connect=min(s.connect_timeout_s, s.timeout_s), pool=None),
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                verify=self._tls,
            )
        )
        shards.append(client)
        return client

    def _pick(self, tried: set[str]) -> Endpoint:
        """An endpoint not tried yet for this request and not marked down, if there is one."""
        now = time.monotonic()
        pool = [e for e in self.endpoints if e.url not in tried] or self.endpoints
        pool = [e for e in pool if e.down_until <= now] or pool
        self._turn += 1
        start = self._turn % len(pool)
        rotated = pool[start:] + pool[:start]
        if self.settings.balance == "round_robin":
            return rotated[0]
        return min(rotated, key=lambda e: e.in_flight)

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        return min(s.backoff_max_s, s.backoff_s * 2.0 ** (attempt - 1)) * self._rng.uniform(0.5, 1.5)

    async def _post(self, body: dict[str, Any], tried: set[str]) -> Completion:
        state = self._loop_state()
        async with state.semaphore:  # pick only once admitted, so in-flight counts are current
            endpoint = self._pick(tried)
            tried.add(endpoint.url)
            client = self._client(state, endpoint.url)
            endpoint.in_flight += 1
            client.in_flight += 1
            start = time.perf_counter()
            try:
                # httpx's timeouts bound each read; wait_for bounds the request, a trickling answer included
                response = await asyncio.wait_for(
                    client.http.post("/chat/completions", json=body), self.settings.timeout_s
                )
            except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
                self._fail(endpoint, start, "timeout")
                message = f"{endpoint.url}: no answer within {self.settings.timeout_s:g} s ({type(exc).__name__})"
                raise JudgeRequestError(message, "timeout") from None
            except httpx.TransportError as exc:
                endpoint.down_until = time.monotonic() + max(self.settings.backoff_s, 0.1) * 4
                self._fail(endpoint, start, "connect")
                raise JudgeRequestError(f"{endpoint.url}: {type(exc).__name__}: {exc}", "connect") from None
            finally:
                endpoint.in_flight -= 1
                client.in_flight -= 1
        latency = time.perf_counter() - start
        if response.status_code != HTTPStatus.OK:
            kind = f"http_{response.status_code}"
            self.metrics.record_request(endpoint.url, latency, kind)
            raise JudgeRequestError(f"{endpoint.url}: HTTP {response.status_code}: {_snippet(response.text)}", kind)
        try:
            choice = response.json()["choices"][0]
            message = choice["message"]
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise TypeError(f"content is {type(content).__name__}")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            self.metrics.record_request(endpoint.url, latency, "bad_response")
            raise JudgeRequestError(
                f"{endpoint.url}: not a chat completion ({type(exc).__name__}: {exc}): {_snippet(response.text)}",
                "bad_response",
            ) from None
        self.metrics.record_request(endpoint.url, latency)
        return Completion(content, choice.get("finish_reason"))

    def _fail(self, endpoint: Endpoint, start: float, kind: str) -> None:
        self.metrics.record_request(endpoint.url, time.perf_counter() - start, kind)


def _retryable(kind: str) -> bool:
    if kind.startswith("http_"):
        status = int(kind[5:])
        return (
            status in (HTTPStatus.REQUEST_TIMEOUT, HTTPStatus.TOO_MANY_REQUESTS)
            or status >= HTTPStatus.INTERNAL_SERVER_ERROR
        )
    return True


def _snippet(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
