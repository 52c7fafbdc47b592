"""The OpenAI-compatible endpoint an agent program talks to during a rollout.

Each episode gets its own API key; a request is answered by that episode's :class:`Answerer` (the
policy, through the episode's exact token record). A request without a key, with a key of no
episode or of one that ended, for another model, or that is not a chat completion this endpoint can
serve gets OpenAI's error shape with a 4xx status and a message that says what to change. Streaming
is served as server-sent events of the finished answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

import cachetools

from rlfcore.types import Message, ToolCall

MAX_BODY_BYTES = 16 * 1024 * 1024
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SAMPLING_FIELDS = ("max_tokens", "max_completion_tokens", "n", "stop", "seed")
"""The request's fields this endpoint applies; temperature and top_p are the run's (rollout.sampling),
since training needs the distribution the tokens were sampled from."""
MAX_N = 16
"""The most choices (``n``) one request may ask for."""


class RequestError(Exception):
    """A request this endpoint refuses: its HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < HTTPStatus.INTERNAL_SERVER_ERROR else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """A validated chat-completion request."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    parse_calls: bool
    """False without ``tools`` or with ``tool_choice: none``: the answer is text only, as generated."""
    n: int = 1
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False


@dataclass
class Choice:
    """One generated answer, as the agent reads it."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str
    """``stop``, ``length`` or ``tool_calls``."""
    completion_tokens: int


@dataclass
class Answer:
    choices: list[Choice]
    prompt_tokens: int


class Answerer(Protocol):
    """One episode's side of the endpoint."""

    ended: str | None
    """Why the episode ended, once it has."""

    async def complete(self, request: ChatRequest) -> Answer: ...

    def report(self, reward: float) -> None:
        """The agent's own judgement of its episode (``POST /v1/rlf/reward``)."""


def _error(status: int, message: str, code: str, param: str | None = None) -> RequestError:
    return RequestError(status, message, code, param)


def _tool_list(tools: Any) -> bool:
    return isinstance(tools, list) and all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance((t.get("function") or {}).get("name"), str)
        for t in tools
    )


def parse_request(body: Any, model: str) -> ChatRequest:
    """The request, checked field by field; a :class:`RequestError` names the first bad one."""
    if not isinstance(body, dict):
        raise _error(400, "the request body must be a JSON object", "invalid_body")
    if body.get("model") != model:
        raise _error(
            404,
            f"model {body.get('model')!r} does not exist here: this endpoint serves {model!r}",
            "model_not_found",
            "model",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _error(400, "messages must be a non-empty list", "invalid_messages", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _error(
                400, f"messages[{i}] needs a role, one of {sorted(ROLES)}", "invalid_messages", f"messages[{i}]"
            )
        if m["role"] == "tool" and not isinstance(m.get("content"), (str, list)):
            raise _error(400, f"messages[{i}] (tool) needs a content", "invalid_messages", f"messages[{i}].content")
    tools = body.get("tools") or None
    if tools is not None and not _tool_list(tools):
        raise _error(400, "tools must be a list of {type: function, function: {name, ...}}", "invalid_tools", "tools")
    choice = body.get("tool_choice", "auto")
    if choice not in ("auto", "none"):
        raise _error(
            400,
            f"tool_choice {choice!r} is not supported: rlf samples the policy as it is (auto), or reads no calls (none)",
            "unsupported_tool_choice",
            "tool_choice",
        )
    n = body.get("n") or 1
    if not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise _error(400, f"n must be an integer from 1 to {MAX_N}", "invalid_n", "n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise _error(400, "max_tokens must be a positive integer", "invalid_max_tokens", "max_tokens")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise _error(400, "stop must be a string or a list of strings", "invalid_stop", "stop")
    seed = body.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise _error(400, "seed must be an integer", "invalid_seed", "seed")
    options = body.get("stream_options") or {}
    return ChatRequest(
        messages=messages,
        tools=tools,
        parse_calls=choice == "auto" and tools is not None,
        n=n,
        max_tokens=max_tokens,
        stop=stop,
        seed=seed,
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def _message(choice: Choice) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.content or None}
    if choice.tool_calls:
        message["tool_calls"] = [_call(c) for c in choice.tool_calls]
    return message


def _call(c: ToolCall) -> dict[str, Any]:
    args = c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, ensure_ascii=False)
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}}


def _usage(answer: Answer) -> dict[str, int]:
    done = sum(c.completion_tokens for c in answer.choices)
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": done,
        "total_tokens": answer.prompt_tokens + done,
    }


def completion(answer: Answer, model: str) -> dict[str, Any]:
    """OpenAI's ``chat.completion`` object."""
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "message": _message(c), "finish_reason": c.finish_reason, "logprobs": None}
            for i, c in enumerate(answer.choices)
        ],
        "usage": _usage(answer),
    }


def chunks(answer: Answer, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The same answer as ``chat.completion.chunk`` objects: per choice its role, its text and its
    calls, then its finish reason; the usage last when asked for."""
    base = {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = model
    for i, c in enumerate(answer.choices):
        yield {**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        if c.content:
            yield {**base, "choices": [{"index": i, "delta": {"content": c.content}, "finish_reason": None}]}
        for k, call in enumerate(c.tool_calls):
            delta = {"tool_calls": [{"index": k, **_call(call)}]}
            yield {**base, "choices": [{"index": i, "delta": delta, "finish_reason": None}]}
        yield {**base, "choices": [{"index": i, "delta": {}, "finish_reason": c.finish_reason}]}
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(answer)}


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Asgi = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]
Handler = Callable[[str | None, Receive, Send], Awaitable[None]]
_JSON = (b"content-type", b"application/json")
_EVENTS = (b"content-type", b"text/event-stream; charset=utf-8")


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    start = [_JSON, (b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, exc: RequestError, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await _respond(send, exc.status, _json(exc.body()), headers)


async def _body(receive: Receive) -> bytes | None:
    """The request's body (None if the client disconnected); one over :data:`MAX_BODY_BYTES` is
    read to its end but not kept, and refused with 413."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        size += len(part)
        if size <= MAX_BODY_BYTES:
            parts.append(part)
        if not message.get("more_body", False):
            break
    if size > MAX_BODY_BYTES:
        raise _error(413, f"the request is over {MAX_BODY_BYTES} bytes", "request_too_large")
    return parts[0] if len(parts) == 1 else b"".join(parts)


class Gateway:
    """The endpoint: episodes by key, served by uvicorn on the run's event loop."""

    def __init__(self, host: str, model: str):
        self.host, self.model = host, model
        self.episodes: dict[str, Answerer] = {}
        self._ended: cachetools.LRUCache[str, str] = cachetools.LRUCache(maxsize=65_536)
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self.base_url = ""

    def add(self, episode: Answerer) -> str:
        """A new key for ``episode``."""
        key = f"rlf-{secrets.token_urlsafe(24)}"
        self.episodes[key] = episode
        return key

    def remove(self, key: str, reason: str) -> None:
        self.episodes.pop(key, None)
        self._ended[key] = reason

    def episode(self, authorization: str | None) -> Answerer:
        if not authorization or not authorization.startswith("Bearer "):
            raise _error(401, "no API key: use the key rlf gave this episode (OPENAI_API_KEY)", "missing_api_key")
        key = authorization.removeprefix("Bearer ").strip()
        found = self.episodes.get(key)
        if found is None:
            if key in self._ended:
                raise _error(
                    409, f"this episode has ended ({self._ended[key]}): it takes no more requests", "episode_ended"
                )
            raise _error(401, "this API key belongs to no episode of this run", "invalid_api_key")
        if found.ended is not None:
            raise _error(409, f"this episode has ended ({found.ended}): it takes no more requests", "episode_ended")
        return found

    def app(self) -> Asgi:
        """The endpoint as a bare ASGI application: three routes, JSON in and out, and no framework
        between uvicorn and the handlers, since every turn of every agent pays for each layer."""
        routes: dict[str, tuple[frozenset[str], Handler]] = {
            "/v1/models": (frozenset({"GET", "HEAD"}), self._models),
            "/v1/chat/completions": (frozenset({"POST"}), self._chat),
            "/v1/rlf/reward": (frozenset({"POST"}), self._reward),
        }

        async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                return
            route = routes.get(scope["path"])
            if route is None:
                where = ", ".join(routes)
                return await _refuse(
                    send, _error(404, f"no route {scope['path']}: this endpoint serves {where}", "not_found")
                )
            methods, handler = route
            if scope["method"] not in methods:
                allowed = ", ".join(sorted(methods))
                refusal = _error(405, f"{scope['path']} takes {allowed}, not {scope['method']}", "method_not_allowed")
                return await _refuse(send, refusal, [(b"allow", allowed.encode())])
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            await handler(authorization, receive, send)

        return app

    async def _models(self, authorization: str | None, _receive: Receive, send: Send) -> None:
        try:
            self.episode(authorization)
        except RequestError as exc:
            return await _refuse(send, exc)
        await _respond(
            send, 200, _json({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "rlf"}]})
        )

    async def _chat(self, authorization: str | None, receive: Receive, send: Send) -> None:
        try:
            episode = self.episode(authorization)
            raw = await _body(receive)
            if raw is None:
                return  # the client went away
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise _error(400, f"the body is not JSON: {exc}", "invalid_json") from None
            parsed = parse_request(body, self.model)
            answer = await episode.complete(parsed)
        except RequestError as exc:
            return await _refuse(send, exc)
        if not parsed.stream:
            return await _respond(send, 200, _json(completion(answer, self.model)))
        await send({"type": "http.response.start", "status": 200, "headers": [_EVENTS]})
        for chunk in chunks(answer, self.model, parsed.include_usage):
            event = f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    async def _reward(self, authorization: str | None, receive: Receive, send: Send) -> None:
        """An agent's own reward for its episode: ``{"reward": NUMBER}``, once or more (the last counts)."""
        try:
            episode = self.episode(authorization)
            raw = await _body(receive)
            if raw is None:
                return
            try:
                value = json.loads(raw).get("reward")
            except (ValueError, AttributeError):
                value = None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise _error(400, 'the body must be {"reward": NUMBER}, a finite number', "invalid_reward", "reward")
            episode.report(float(value))
        except RequestError as exc:
            return await _refuse(send, exc)
        await _respond(send, 200, _json({"reward": float(value)}))

    async def start(self) -> None:
        """Listen on a free port of ``host``; :attr:`base_url` says where."""
        try:
            import uvicorn
        except ImportError as exc:
            raise RuntimeError(f"the agent endpoint needs {exc.name}: pip install 'rlfcore[agents]'") from None

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:  # the run owns SIGINT (checkpoints), not the endpoint
                yield

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        port = sock.getsockname()[1]
        host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        self.base_url = f"http://{host}:{port}/v1"
        config = uvicorn.Config(
            self.app(),
            lifespan="off",
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # loopback only: no proxy's X-Forwarded-For to read
            backlog=4096,
            timeout_graceful_shutdown=5,
        )
        self._server = Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None
