"""A rollout engine on any OpenAI-compatible completions server (vLLM, SGLang, llama.cpp).

Token ids go out as the prompt and come back as ids, so evaluation against a served model sees the
same tokens training would. The engine asks vLLM for ids in three ways and reads the first that
answers; a server that gives only text needs a tokenizer, and then the ids are not token-exact.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import httpx

from rlfcore.engines.base import Engine, Generation, SamplingParams

if TYPE_CHECKING:
    from rlfcore.chat import ChatTokenizer
    from rlfcore.config import EngineConfig

_ID_PREFIX = "token_id:"


class EngineError(RuntimeError):
    """A generation request failed for good: the message names the URL and what the server said."""


class JSONEndpoint:
    """One OpenAI-compatible route: a pooled client per event loop and a POST that retries what may pass.

    Connection errors, HTTP 429 and 5xx are retried ``max_retries`` times with exponential backoff
    (``backoff_s``, doubled each time); other HTTP errors fail at once. A server that has not answered
    within ``timeout_s`` is not retried (it is most likely still busy with the request). Every failure
    is an :class:`EngineError` naming the URL and what the server said.
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
    ):
        self.url = url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_connections = max_connections
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
        client = self._client_for_loop()
        attempts = self.max_retries + 1
        problem = ""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await client.post(self.url, json=body)
            except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
                raise EngineError(
                    f"{self.url}: no answer within {self.timeout_s:g}s (timed out) for request {request_id!r}"
                ) from None
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code == 200:
                try:
                    return response.json()
                except ValueError:
                    raise EngineError(f"{self.url}: the answer is not JSON: {_snippet(response.text)}") from None
            problem = f"HTTP {response.status_code}: {_snippet(response.text)}"
            if response.status_code != 429 and response.status_code < 500:
                raise EngineError(f"{self.url}: {problem}")
        raise EngineError(f"{self.url}: failed after {attempts} attempts; last: {problem}")


class OpenAIEngine(JSONEndpoint, Engine):
    """POSTs ``{base_url}/completions`` once per ``generate`` call; calls may run concurrently.

    Failures are retried or raised as :class:`JSONEndpoint` says, as :class:`EngineError`.

    Token ids are read from vLLM's ``logprobs.tokens`` (``token_id:N``, asked for with
    ``return_tokens_as_token_ids``), else from ``choices[0].token_ids`` (``return_token_ids``), else by
    encoding ``choices[0].text`` with ``tokenizer``. That last path is *not* token-exact: the text may
    encode to other ids than the model sampled, and logprobs are dropped when the counts disagree.

    Logprobs are whatever the server reports: vLLM's default is the temperature-1 distribution; serve
    with ``--logprobs-mode processed_logprobs`` (and no top-k/top-p) for the temperature-T logprobs
    the local trainer computes (checked against vLLM 0.32 in tests/test_vllm_server.py).

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
        extra_body: dict[str, Any] | None = None,
    ):
        super().__init__(
            base_url.rstrip("/") + "/completions",
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_connections=max_connections,
        )
        self.model = model
        self.tokenizer = tokenizer
        self.extra_body = dict(extra_body or {})

    @classmethod
    def from_config(cls, cfg: EngineConfig, tokenizer: ChatTokenizer | None = None) -> OpenAIEngine:
        if not cfg.base_url:
            raise ValueError("engine 'openai' needs engine.base_url: the server's URL, ending in /v1")
        return cls(cfg.base_url, cfg.model, api_key=cfg.api_key, timeout_s=cfg.timeout_s, tokenizer=tokenizer)

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
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise EngineError(f"{self.url}: the answer has no choices[0]: {_snippet(data)}") from None
        return parse_choice(choice, params, self.tokenizer, self.url)


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
    """The Generation in one completions choice (see :class:`OpenAIEngine` for where ids come from)."""
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise EngineError(f"{url}: unexpected finish_reason {finish!r} (expected 'stop' or 'length')")
    lp = choice.get("logprobs") or {}
    tokens = lp.get("tokens") or []
    logprobs: list[float] | None = lp.get("token_logprobs")
    if tokens and all(isinstance(t, str) and t.startswith(_ID_PREFIX) for t in tokens):
        ids = [int(t[len(_ID_PREFIX) :]) for t in tokens]
    elif isinstance(choice.get("token_ids"), list):
        ids = [int(t) for t in choice["token_ids"]]
    elif tokenizer is not None:
        ids = tokenizer.encode(choice.get("text") or "")
    else:
        raise EngineError(
            f"{url}: the answer carries no token ids (neither logprobs.tokens as 'token_id:N' nor token_ids); "
            "give the engine a tokenizer to encode the text instead"
        )
    if logprobs is not None and (len(logprobs) != len(ids) or any(x is None for x in logprobs)):
        logprobs = None
    logprobs = [float(x) for x in logprobs] if logprobs is not None else None
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


def _snippet(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
