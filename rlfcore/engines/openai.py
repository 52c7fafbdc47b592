"""A rollout engine on any OpenAI-compatible completions server (vLLM, SGLang, llama.cpp).

Token ids go out as the prompt and come back as ids, so evaluation against a served model sees the
same tokens training would. The engine asks vLLM for ids in three ways and reads the first that
answers; a server that gives only text needs a tokenizer, and then the ids are not token-exact.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from rlfcore.engines.answers import (
    ERROR_BODY_BYTES,
    EngineError,
    first_choice,
    loads,
    read_upto,
    retry_after_s,
    shown,
    snippet,
    typed,
)
from rlfcore.engines.base import Engine, Generation, SamplingParams

if TYPE_CHECKING:
    from rlfcore.chat import ChatTokenizer
    from rlfcore.config import EngineConfig

_ID_PREFIX = "token_id:"


class JSONEndpoint:
    """One OpenAI-compatible route: a pooled client per event loop and a POST that retries what may pass.

    A call answers within ``timeout_s`` in all (connecting, every attempt, the waits between them and
    reading the answer), or fails; a server that has not answered by then is not retried (it is most
    likely still busy with the request). Connection errors, HTTP 429 and 5xx are retried
    ``max_retries`` times, after the wait the server's ``Retry-After`` asks for, else with exponential
    backoff (``backoff_s``, doubled each time); a wait that would end past the deadline fails at once.
    Other HTTP errors fail at once. An answer longer than ``max_response_bytes`` is not read further;
    of an error answer only its first bytes are read, for the message. Every failure is an
    :class:`EngineError` naming the URL and what the server said.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_connections: int = 256,
        max_response_bytes: int = 64 * 2**20,
    ):
        self.url = url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_connections = max_connections
        self.max_response_bytes = max_response_bytes
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def close(self) -> None:
        """Close the connection pool of this event loop; a later call opens a new one."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = self._loop = None

    def _client_for_loop(self) -> httpx.AsyncClient:
        # Pooled connections belong to one event loop; a trainer may run each rollout in a new one.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0), pool=None),
                limits=httpx.Limits(
                    max_connections=self.max_connections, max_keepalive_connections=self.max_connections
                ),
            )
            self._loop = loop
        return self._client

    async def _post(self, body: dict[str, Any], request_id: str) -> Any:
        timed_out = f"{self.url}: no answer within {self.timeout_s:g}s (timed out) for request {request_id!r}"
        try:
            with anyio.fail_after(self.timeout_s) as deadline:
                return await self._attempts(body, deadline)
        except (TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise EngineError(timed_out) from None

    async def _attempts(self, body: dict[str, Any], deadline: anyio.CancelScope) -> Any:
        # A loop, not tenacity: retryable answers are no exceptions and each wait (Retry-After or backoff) is
        # checked against the one anyio deadline; tenacity's callbacks for that would be longer than the loop.
        client = self._client_for_loop()
        attempts = self.max_retries + 1
        problem = ""
        wait = 0.0
        for attempt in range(attempts):
            if attempt:
                left = deadline.deadline - anyio.current_time()
                if wait >= left:
                    raise EngineError(
                        f"{self.url}: gave up after attempt {attempt}: the next could start only in {wait:.3g}s, "
                        f"and {max(left, 0):.3g}s of engine.timeout_s ({self.timeout_s:g}s) are left; last: {problem}"
                    )
                await anyio.sleep(wait)
            wait = self.backoff_s * 2**attempt
            try:
                async with client.stream("POST", self.url, json=body) as response:
                    if response.status_code == HTTPStatus.OK:
                        return await self._read_json(response)
                    text, _ = await read_upto(response, ERROR_BODY_BYTES)
            except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
                raise
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            status = response.status_code
            problem = f"HTTP {status}: {snippet(text.decode(errors='replace'))}"
            if status != HTTPStatus.TOO_MANY_REQUESTS and status < HTTPStatus.INTERNAL_SERVER_ERROR:  # not transient
                raise EngineError(f"{self.url}: {problem}")
            asked = retry_after_s(response.headers.get("Retry-After"))
            if asked is not None:
                wait = asked
                problem += f" (Retry-After: {asked:.3g}s)"
        raise EngineError(f"{self.url}: failed after {attempts} attempts; last: {problem}")

    async def _read_json(self, response: httpx.Response) -> Any:
        data, more = await read_upto(response, self.max_response_bytes)
        if more:
            raise EngineError(
                f"{self.url}: the answer is longer than engine.max_response_bytes ({self.max_response_bytes} bytes); "
                "the rest was not read"
            )
        try:
            return loads(data)
        except ValueError as exc:
            raise EngineError(
                f"{self.url}: the answer is not JSON ({exc}): {snippet(data.decode(errors='replace'))}"
            ) from None


class OpenAIEngine(JSONEndpoint, Engine):
    """POSTs ``{base_url}/completions`` once per ``generate`` call; calls may run concurrently.

    Failures are retried or raised as :class:`JSONEndpoint` says, as :class:`EngineError`.

    Token ids are read from vLLM's ``logprobs.tokens`` (``token_id:N``, asked for with
    ``return_tokens_as_token_ids``), else from ``choices[0].token_ids`` (``return_token_ids``), else by
    encoding ``choices[0].text`` with ``tokenizer``. That last path is *not* token-exact: the text may
    encode to other ids than the model sampled, and logprobs are dropped when the counts disagree.

    Logprobs are whatever the server reports: vLLM's default is the temperature-1 distribution; serve
    with ``--logprobs-mode processed_logprobs`` (and no top-k/top-p) for the temperature-T logprobs
    the local trainer computes (checked against vLLM 0.32 in tests/engines/test_vllm_server.py).

    A server that stops on a stop token may leave that token out (vLLM does so for EOS in some
    versions); the engine then appends it, so ``token_ids`` end with it as :class:`Generation`
    promises: the id the server names in ``stop_reason`` (vLLM) or ``matched_stop`` (SGLang), else the
    tokenizer's first EOS id, else the first of ``params.stop_token_ids`` (with none of these known,
    the ids stay as sent). Its logprob is unknown and reported as 0.0. A stop on one of
    ``params.stop`` (sent as ``stop``; the server names the string in ``stop_reason`` or
    ``matched_stop``) appends nothing: the ids end with the token that completed the string.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        tokenizer: ChatTokenizer | None = None,
        max_connections: int = 256,
        max_response_bytes: int = 64 * 2**20,
        extra_body: dict[str, Any] | None = None,
    ):
        super().__init__(
            base_url.rstrip("/") + "/completions",
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_connections=max_connections,
            max_response_bytes=max_response_bytes,
        )
        self.model = model
        self.tokenizer = tokenizer
        self.extra_body = dict(extra_body or {})

    @classmethod
    def from_config(cls, cfg: EngineConfig, tokenizer: ChatTokenizer | None = None) -> OpenAIEngine:
        if not cfg.base_url:
            raise ValueError("engine 'openai' needs engine.base_url: the server's URL, ending in /v1")
        return cls(
            cfg.base_url,
            cfg.model,
            api_key=cfg.key(),
            timeout_s=cfg.timeout_s,
            max_response_bytes=cfg.max_response_bytes,
            tokenizer=tokenizer,
        )

    def request_body(self, prompt_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        """The JSON sent for one generation: OpenAI fields plus the vLLM/SGLang extensions it needs."""
        body: dict[str, Any] = {
            "prompt": list(prompt_ids),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 1,
            "stop_token_ids": list(params.stop_token_ids),
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if self.model:
            body["model"] = self.model
        body.update(optional_sampling(params))
        if params.stop:
            body["include_stop_str_in_output"] = True  # vLLM: the text keeps the stop string, as the ids do
        body.update(self.extra_body)
        return body

    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        data = await self._post(self.request_body(prompt_ids, params), request_id)
        return parse_choice(first_choice(data, self.url), params, self.tokenizer, self.url)


def optional_sampling(params: SamplingParams) -> dict[str, Any]:
    """The sampling fields an OpenAI-compatible request carries only when set (top_k, seed, stop)."""
    fields: dict[str, Any] = {}
    if params.top_k != -1:
        fields["top_k"] = params.top_k
    if params.seed is not None:
        fields["seed"] = params.seed
    if params.stop:
        fields["stop"] = list(params.stop)
    return fields


def parse_choice(
    choice: dict[str, Any], params: SamplingParams, tokenizer: ChatTokenizer | None = None, url: str = "server"
) -> Generation:
    """The Generation in one completions choice (see :class:`OpenAIEngine` for where ids come from).

    A field of the wrong type, or an id that is not a non-negative integer, is an :class:`EngineError`
    naming it (``choices[0].logprobs.tokens[3]``).
    """
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise EngineError(f"{url}: unexpected finish_reason {finish!r} (expected 'stop' or 'length')")
    lp = typed(choice.get("logprobs"), (dict, type(None)), "choices[0].logprobs", url) or {}
    tokens = typed(lp.get("tokens"), (list, type(None)), "choices[0].logprobs.tokens", url) or []
    raw_logprobs = typed(lp.get("token_logprobs"), (list, type(None)), "choices[0].logprobs.token_logprobs", url)
    if tokens and all(isinstance(t, str) and t.startswith(_ID_PREFIX) for t in tokens):
        path = "choices[0].logprobs.tokens"
        ids = [_token_id(t[len(_ID_PREFIX) :], f"{path}[{i}]", url, digits=True) for i, t in enumerate(tokens)]
    elif choice.get("token_ids") is not None:
        listed = typed(choice["token_ids"], (list,), "choices[0].token_ids", url)
        ids = [_token_id(t, f"choices[0].token_ids[{i}]", url) for i, t in enumerate(listed)]
    elif tokenizer is not None:
        ids = tokenizer.encode(typed(choice.get("text"), (str, type(None)), "choices[0].text", url) or "")
    else:
        raise EngineError(
            f"{url}: the answer carries no token ids (neither logprobs.tokens as 'token_id:N' nor token_ids); "
            "give the engine a tokenizer to encode the text instead"
        )
    logprobs: list[float] | None = None
    if raw_logprobs is not None:
        path = "choices[0].logprobs.token_logprobs"
        known = [typed(x, (int, float, type(None)), f"{path}[{i}]", url) for i, x in enumerate(raw_logprobs)]
        if len(known) == len(ids) and all(x is not None for x in known):
            logprobs = [float(x) for x in known]
    stop_string = next((s for s in (choice.get("stop_reason"), choice.get("matched_stop")) if isinstance(s, str)), None)
    if finish == "stop" and stop_string is None:
        named = next((s for s in (choice.get("stop_reason"), choice.get("matched_stop")) if _is_id(s)), None)
        eos = list(tokenizer.eos_token_ids) if tokenizer is not None else []
        if not ids or ids[-1] not in {*params.stop_token_ids, *eos, *([named] if named is not None else [])}:
            ends = eos or list(params.stop_token_ids)
            missing = named if named is not None else (ends[0] if ends else None)
            if missing is not None:
                ids.append(missing)
                if logprobs is not None:
                    logprobs.append(0.0)
    return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_id(value: Any, path: str, url: str, *, digits: bool = False) -> int:
    """A token id: a non-negative integer, or with ``digits`` the text after ``token_id:``; else names ``path``."""
    if digits and isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if not digits and _is_id(value) and value >= 0:
        return int(value)
    raise EngineError(f"{url}: {path} should be a token id (a non-negative integer), got {shown(value)}")
