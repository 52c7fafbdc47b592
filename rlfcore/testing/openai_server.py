"""A loopback OpenAI-compatible server: the stand-in for vLLM, SGLang or a hosted API in tests.

No model and no network: :class:`OpenAIServer` answers ``POST /v1/chat/completions`` and
``POST /v1/completions`` over real HTTP on 127.0.0.1 (a free port, its own thread), in the shapes vLLM
answers, so a client's real HTTP stack, retries and timeouts are what a test exercises. Each request is
recorded (:attr:`OpenAIServer.received`); its answer is the next of :attr:`OpenAIServer.script`, else
what the route's responder makes of the body. A :class:`Reply` scripts an answer or a failure: an
HTTP status, a delay (a hang, past the client's timeout), a body trickled byte by byte, a body that is
not JSON. Any other path is a 404, a body that is not JSON a 400, and a missing key a 401 when the
server has an ``api_key``. :func:`closed_url` is an endpoint that is down.

Run as a script (``python -m rlfcore.testing.openai_server --delay-s 0.05 --content TEXT``) it prints
its base URL and answers every chat request with ``TEXT`` after the delay, until its stdin closes: a
server in its own process, for benchmarks.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = ["OpenAIServer", "Reply", "Request", "Responder", "calculator", "closed_url", "counting"]

_BYTE_IDS = 256
"""Ids below this are one character each in a completion's text (the byte tokenizer's ids)."""


@dataclass
class Reply:
    """One answer. Chat: ``content``, ``tool_calls`` (OpenAI's shape, arguments a JSON string) and
    ``reasoning`` (vLLM's ``reasoning_content``). Completions: ``token_ids`` and their ``logprobs``,
    carried where ``ids_in`` says (vLLM's ``logprobs.tokens`` as ``token_id:N``, the ``token_ids``
    field, or only the text, each id below 256 one character); ``content`` is then the text."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    ids_in: Literal["logprobs", "token_ids", "text"] = "logprobs"
    finish_reason: str = "stop"
    stop_reason: int | str | None = None
    """vLLM's name for the stop token or string that ended a completion (None for EOS)."""
    status: int = 200
    """Any other status answers ``{"error": {"message": "scripted HTTP N"}}`` (or ``raw``)."""
    delay_s: float = 0.0
    """Seconds before answering, on top of the server's ``delay_s``: past a client's timeout, a hang."""
    trickle_s: float = 0.0
    """Seconds between the bytes of the body: an endpoint that is alive but all but stalled."""
    raw: str | None = None
    """The whole body, sent as is: an answer that is not JSON, or JSON of any shape."""


@dataclass
class Request:
    """One request as received: its path, headers and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Responder = Callable[[dict[str, Any]], "Reply | str"]
"""Makes the answer to a request body: a :class:`Reply`, or a string (the content of a plain reply)."""


class OpenAIServer:
    """``with OpenAIServer(chat=..., completions=...) as server:`` serves on ``server.base_url``
    (ending in ``/v1``). ``chat`` and ``completions`` answer their routes: a :data:`Responder`, or one
    :class:`Reply` or string for every request; by default :func:`calculator` and :func:`counting`.
    ``delay_s`` delays every answer; ``record=False`` keeps no requests (a long benchmark)."""

    def __init__(
        self,
        chat: Responder | Reply | str | None = None,
        completions: Responder | Reply | None = None,
        *,
        delay_s: float = 0.0,
        api_key: str | None = None,
        record: bool = True,
    ):
        self.chat = _responder(chat) if chat is not None else calculator
        self.completions = _responder(completions) if completions is not None else counting()
        self.delay_s = delay_s
        self.api_key = api_key
        self.record = record
        self.script: list[Reply | str] = []
        """Answers to the next requests, one each, before the responders are asked."""
        self.received: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        """The most requests answered at once: how much concurrency a client really used."""
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    @property
    def base_url(self) -> str:
        """Where the server listens, ending in ``/v1``; still readable once closed (for messages)."""
        assert self._url is not None, "the server is not started"
        return self._url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received, in order."""
        return [r.body for r in self.received]

    def prompt(self, i: int = -1) -> str:
        """The last message's content of the i-th chat request."""
        content: str = self.received[i].body["messages"][-1]["content"]
        return content

    def start(self, port: int = 0) -> OpenAIServer:
        self._httpd = _Server(("127.0.0.1", port), _handler(self))
        host, bound = self._httpd.server_address[:2]
        self._url = f"http://{host!s}:{bound}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; handlers still sleeping on a scripted hang are daemon threads and are left."""
        if self._httpd is not None and self._thread is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._httpd = self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reply(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        with self._lock:
            if self.record:
                self.received.append(Request(path, headers, body))
            scripted = self.script.pop(0) if self.script else None
        got = (
            scripted
            if scripted is not None
            else (self.chat if path.endswith("/chat/completions") else self.completions)(body)
        )
        return Reply(content=got) if isinstance(got, str) else got


def _responder(answer: Responder | Reply | str) -> Responder:
    if isinstance(answer, (Reply, str)):
        return lambda _body: answer
    return answer


def closed_url() -> str:
    """The base URL of a loopback port nobody listens on: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def counting(
    vocab: int = 300,
    eos_id: int | None = None,
    ids_in: Literal["logprobs", "token_ids", "text"] = "logprobs",
    omit_stop: bool = False,
) -> Responder:
    """Completions that can be checked exactly: a prompt ending in token ``x`` continues ``x+1, x+2, ...``
    (mod ``vocab``), the k-th token's logprob ``-k/100``, up to the first of the request's
    ``stop_token_ids`` or ``eos_id`` (vLLM names no ``stop_reason`` for EOS). ``omit_stop`` leaves the
    stop token out of the ids, as vLLM may."""

    def respond(body: dict[str, Any]) -> Reply:
        stops = set(body.get("stop_token_ids") or [])
        last = body["prompt"][-1]
        ids: list[int] = []
        finish, stop_reason = "length", None
        while len(ids) < body.get("max_tokens", 16):
            last = (last + 1) % vocab
            ids.append(last)
            if last == eos_id or last in stops:
                finish, stop_reason = "stop", (None if last == eos_id else last)
                break
        if finish == "stop" and omit_stop:
            ids = ids[:-1]
        logprobs = [-(k + 1) / 100 for k in range(len(ids))]
        return Reply(token_ids=ids, logprobs=logprobs, ids_in=ids_in, finish_reason=finish, stop_reason=stop_reason)

    return respond


_QUESTION = re.compile(r"What is (-?\d+\s*[-+*/]\s*-?\d+)\?")
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def calculator(body: dict[str, Any]) -> Reply:
    """A chat model that solves rlf's calculator example: a question "What is A op B?" gets a call of
    ``calculate`` (in ``tool_calls`` when the request has ``tools``, else as Hermes ``<tool_call>``
    text), a tool result (a ``tool`` message, or ``<tool_response>`` text) gets its content as the answer."""
    last = body["messages"][-1]
    content = last.get("content") or ""
    result = content if last["role"] == "tool" else next(iter(_RESPONSE.findall(content)), None)
    if result is not None:
        return Reply(result.strip())
    question = _QUESTION.search(content)
    if question is None:
        return Reply("I do not know.")
    arguments = {"expression": question.group(1).replace(" ", "")}
    if body.get("tools"):
        call = {
            "id": f"call_{len(body['messages'])}",
            "type": "function",
            "function": {"name": "calculate", "arguments": json.dumps(arguments)},
        }
        return Reply(tool_calls=[call], finish_reason="tool_calls")
    return Reply(f"<tool_call>\n{json.dumps({'name': 'calculate', 'arguments': arguments})}\n</tool_call>")


def chat_completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The chat-completions answer carrying ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls is not None:
        message["tool_calls"] = reply.tool_calls
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The completions answer carrying ``reply``, its ids where ``reply.ids_in`` says."""
    ids = reply.token_ids
    text = reply.content if reply.content is not None else "".join(chr(i) for i in ids if i < _BYTE_IDS)
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": reply.finish_reason,
        "stop_reason": reply.stop_reason,
    }
    if reply.ids_in == "logprobs":
        logprobs = reply.logprobs if reply.logprobs is not None else [0.0] * len(ids)
        choice["logprobs"] = {
            "tokens": [f"token_id:{i}" for i in ids],
            "token_logprobs": logprobs,
            "top_logprobs": [{f"token_id:{i}": lp} for i, lp in zip(ids, logprobs)],
            "text_offset": list(range(len(ids))),
        }
    elif reply.ids_in == "token_ids":
        choice["token_ids"] = ids
    prompt = body.get("prompt")
    return {
        "id": "cmpl-stand-in",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [choice],
        "usage": {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 0, "completion_tokens": len(ids)},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the stdlib's 5 drops connections when 64 clients connect at once


_ROUTES = ("/v1/chat/completions", "/v1/completions")


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server

        def setup(self) -> None:
            super().setup()
            # answer at once: without this, Nagle's algorithm and delayed ACKs add ~40 ms per request
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            path = self.path.rstrip("/")
            if path not in _ROUTES:
                return self._send(404, _error(f"no route {self.path}"))
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, _error("body is not JSON"))
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                return self._send(401, _error("Incorrect API key provided"))
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                reply = server._reply(path, dict(self.headers), body)
                time.sleep(server.delay_s + reply.delay_s)
                if reply.raw is not None:
                    text = reply.raw
                elif reply.status != HTTPStatus.OK:
                    text = _error(f"scripted HTTP {reply.status}")
                else:
                    text = json.dumps((chat_completion if path == _ROUTES[0] else completion)(body, reply))
                self._send(reply.status, text, reply.trickle_s)
            finally:
                with server._lock:
                    server.in_flight -= 1

        def _send(self, status: int, text: str, trickle_s: float = 0.0) -> None:
            data = text.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not trickle_s:
                    self.wfile.write(data)
                for i in range(len(data) if trickle_s else 0):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(trickle_s)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    return Handler


def _error(message: str) -> str:
    return json.dumps({"error": {"message": message}})


def main() -> None:
    parser = argparse.ArgumentParser(description="A loopback OpenAI-compatible server answering a fixed text.")
    parser.add_argument("--delay-s", type=float, default=0.05, help="fixed latency of every answer")
    parser.add_argument("--content", default="OK", help="the content of every chat answer")
    args = parser.parse_args()
    server = OpenAIServer(chat=args.content, delay_s=args.delay_s, record=False).start()
    print(server.base_url, flush=True)
    try:
        sys.stdin.read()  # serve until the parent closes our stdin or kills us
    finally:
        server.close()


if __name__ == "__main__":
    main()
