"""The `openai` and `openai-chat` engines against servers that misbehave at the byte level.

A raw-socket server on loopback sends exactly the bytes a scenario says, when it says: headers or a
body trickled a byte at a time, an endless chunked body, a 50 MB error body, answers of the wrong
shape, 429 with ``Retry-After``. Each call must end within ``engine.timeout_s`` plus a little, with an
:class:`EngineError` that names the problem, having read no more than the caps allow.
"""

from __future__ import annotations

import email.utils
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("httpx")

import httpx

from rlfcore.config import EngineConfig
from rlfcore.engines.answers import MAX_JSON_DEPTH, json_depth, read_upto, retry_after_s
from rlfcore.engines.base import SamplingParams
from rlfcore.engines.chat import ChatEngine
from rlfcore.engines.openai import EngineError, OpenAIEngine

SLACK_S = 0.75
MiB = 2**20
COMPLETION = b'{"choices": [{"finish_reason": "length", "token_ids": [5, 6]}]}'
CHAT = b'{"choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]}'

Script = Callable[[int], Iterator["bytes | float"]]
"""A scenario: for the n-th request, the bytes to send and the pauses (floats, in seconds) between them."""


class RawServer:
    """One request per connection, answered by ``script``; counts requests and the bytes it got sent."""

    def __init__(self, script: Script):
        self.script = script
        self.requests = 0
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)

        host, port = self._listener.getsockname()[:2]
        self.base_url = f"http://{host}:{port}/v1"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # little hidden in kernel buffers
        with self._lock:
            n = self.requests
            self.requests += 1
        with conn:
            try:
                _read_request(conn)
                for step in self.script(n):
                    if self._stop.is_set():
                        return
                    if isinstance(step, float):
                        time.sleep(step)
                        continue
                    view = memoryview(step)
                    while view:  # not sendall: what a broken connection took is counted too
                        taken = conn.send(view)
                        with self._lock:
                            self.sent += taken
                        view = view[taken:]
            except OSError:
                pass  # the client hung up: what these tests expect of it


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        body += conn.recv(65536)


def head(status: str = "200 OK", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Connection: close"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def trickle(data: bytes, every_s: float = 0.1) -> Iterator[bytes | float]:
    for i in range(len(data)):
        yield data[i : i + 1]
        yield every_s


async def ask(kind: str, url: str, **kwargs: Any) -> Any:
    """One generation (``completions``) or one chat turn (``chat``), the engine closed after it."""
    kwargs.setdefault("backoff_s", 0.01)
    if kind == "completions":
        engine: OpenAIEngine | ChatEngine = OpenAIEngine(url, **kwargs)
    else:
        engine = ChatEngine(url, **kwargs)
    try:
        if isinstance(engine, OpenAIEngine):
            return await engine.generate([1], SamplingParams(max_tokens=2))
        return await engine.chat([{"role": "user", "content": "hi"}], [], SamplingParams(max_tokens=2))
    finally:
        await engine.close()


async def timed_failure(kind: str, url: str, **kwargs: Any) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(EngineError) as info:
        await ask(kind, url, **kwargs)
    return str(info.value), time.monotonic() - start


KINDS = pytest.mark.parametrize("kind", ["completions", "chat"])


# --- the deadline covers connecting, the headers and the whole body ------------------------------------


@KINDS
async def test_headers_trickled_a_byte_at_a_time_end_at_the_deadline(kind):
    padded = head(X_Pad="a" * 200)

    def script(_n: int) -> Iterator[bytes | float]:
        yield from trickle(padded[:60])  # 6 s: a per-read timeout of 1 s never fires

    with RawServer(script) as server:
        message, took = await timed_failure(kind, server.base_url, timeout_s=1.0)
    assert took < 1.0 + SLACK_S, took
    assert "no answer within 1s (timed out)" in message
    assert server.requests == 1  # a server that did not answer in time is not asked again


@KINDS
async def test_a_body_trickled_a_byte_at_a_time_ends_at_the_deadline(kind):
    def script(_n: int) -> Iterator[bytes | float]:
        yield head(Content_Length=str(len(COMPLETION)))
        yield from trickle(COMPLETION[:60])

    with RawServer(script) as server:
        message, took = await timed_failure(kind, server.base_url, timeout_s=1.0)
    assert took < 1.0 + SLACK_S, took
    assert "no answer within 1s (timed out)" in message


# --- bodies are read up to a cap ------------------------------------------------------------------------


def endless(_n: int) -> Iterator[bytes | float]:
    """A chunked body that goes on (here up to 64 MiB, far past the cap the tests set)."""
    yield head(Transfer_Encoding="chunked")
    chunk = b"[" + b"0," * 32767 + b"0"
    for _ in range(64 * MiB // len(chunk)):
        yield b"%x\r\n%s\r\n" % (len(chunk), chunk)


@KINDS
async def test_an_endless_body_is_cut_off_at_max_response_bytes(kind):
    with RawServer(endless) as server:
        message, took = await timed_failure(kind, server.base_url, timeout_s=10.0, max_response_bytes=MiB)
    assert "the answer is longer than engine.max_response_bytes (1048576 bytes)" in message
    assert took < 5.0, took
    assert server.requests == 1  # a too-long answer is not asked for again
    assert server.sent < 8 * MiB, server.sent  # what the server got into the socket, kernel buffers included


async def test_read_upto_reads_no_more_than_the_cap_and_a_chunk():
    with RawServer(endless) as server:
        async with (
            httpx.AsyncClient() as client,
            client.stream("POST", server.base_url + "/completions", json={}) as response,
        ):
            data, more = await read_upto(response, MiB)
            downloaded = response.num_bytes_downloaded
    assert more and len(data) == MiB
    assert downloaded <= MiB + 128 * 1024, downloaded


@KINDS
async def test_a_50_mb_error_body_is_read_only_for_its_message(kind):
    size = 50_000_000
    start = b'{"error": {"message": "the server is overloaded"}, "padding": "'

    def script(_n: int) -> Iterator[bytes | float]:
        yield head("500 Internal Server Error", Content_Length=str(size))
        yield start
        left = size - len(start)
        while left > 0:
            yield b"x" * min(MiB, left)
            left -= MiB

    with RawServer(script) as server:
        message, took = await timed_failure(kind, server.base_url, timeout_s=10.0, max_retries=1)
    assert "failed after 2 attempts; last: HTTP 500" in message and "the server is overloaded" in message
    assert took < 5.0, took
    assert server.requests == 2 and server.sent < 2 * 4 * MiB, server.sent  # of 100 MB, kernel buffers included


def test_max_response_bytes_comes_from_the_config():
    cfg = EngineConfig(name="openai", base_url="http://127.0.0.1:1/v1", max_response_bytes=4096)
    assert OpenAIEngine.from_config(cfg).max_response_bytes == 4096
    assert ChatEngine.from_config(cfg).max_response_bytes == 4096
    assert EngineConfig().max_response_bytes == 64 * MiB


# --- answers of the wrong shape ---------------------------------------------------------------------


def answering(body: bytes) -> Script:
    def script(_n: int) -> Iterator[bytes | float]:
        yield head(Content_Length=str(len(body))) + body

    return script


def completion(**choice: Any) -> bytes:
    return json.dumps({"choices": [{"finish_reason": "length", **choice}]}).encode()


def deep(depth: int) -> bytes:
    return b'{"choices": ' + b"[" * depth + b"]" * depth + b"}"


WRONG_SHAPES = [
    ("completions", b'{"choices": ["x"]}', r"choices\[0\] should be an object, got a string 'x'"),
    ("completions", b'["x"]', r"the answer should be an object, got an array"),
    ("completions", b'{"choices": []}', r"the answer has no choices\[0\]"),
    (
        "completions",
        completion(logprobs={"tokens": ["token_id:1", "token_id:2", "token_id:3", "token_id:x"]}),
        r"choices\[0\]\.logprobs\.tokens\[3\] should be a token id \(a non-negative integer\), got 'x'",
    ),
    ("completions", completion(token_ids=[5, 6.5]), r"choices\[0\]\.token_ids\[1\] should be a token id.*6\.5"),
    ("completions", completion(token_ids=[5, "6"]), r"choices\[0\]\.token_ids\[1\] should be a token id"),
    ("completions", completion(token_ids=[-1]), r"choices\[0\]\.token_ids\[0\] should be a token id"),
    ("completions", completion(token_ids={"a": 1}), r"choices\[0\]\.token_ids should be an array, got an object"),
    ("completions", completion(logprobs="x", token_ids=[1]), r"choices\[0\]\.logprobs should be an object or null"),
    (
        "completions",
        completion(token_ids=[1], logprobs={"token_logprobs": ["-0.5"]}),
        r"choices\[0\]\.logprobs\.token_logprobs\[0\] should be an integer or a number or null, got a string",
    ),
    ("completions", deep(100_000), r"the answer is not JSON \(arrays and objects nest 100001 deep"),
    ("completions", b"{not json", r"the answer is not JSON"),
    (
        "chat",
        b'{"choices": [{"message": "hi", "finish_reason": "stop"}]}',
        r"choices\[0\]\.message should be an object",
    ),
    ("chat", b'{"choices": [{"finish_reason": "stop"}]}', r"the answer has no choices\[0\]\.message"),
    (
        "chat",
        b'{"choices": [{"message": {"content": 5}, "finish_reason": "stop"}]}',
        r"choices\[0\]\.message\.content should be a string or null, got an integer 5",
    ),
    (
        "chat",
        b'{"choices": [{"message": {"tool_calls": {}}, "finish_reason": "stop"}]}',
        r"choices\[0\]\.message\.tool_calls should be an array or null",
    ),
    (
        "chat",
        b'{"choices": [{"message": {"content": "a"}, "finish_reason": "stop"}], "usage": {"completion_tokens": "7"}}',
        r"usage\.completion_tokens should be an integer or null, got a string",
    ),
    ("chat", deep(5_000), r"nest 5001 deep, more than the 100 allowed"),
]


@pytest.mark.parametrize(("kind", "body", "expected"), WRONG_SHAPES)
async def test_wrong_shapes_are_engine_errors_naming_the_field(kind, body, expected):
    with RawServer(answering(body)) as server:
        message, took = await timed_failure(kind, server.base_url, timeout_s=5.0)
    assert took < 2.0, took
    assert server.base_url in message
    assert re.search(expected, message), message
    assert server.requests == 1


async def test_deep_tool_call_arguments_make_an_error_call():
    arguments = "[" * 50_000 + "]" * 50_000
    call = {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": arguments}}
    body = json.dumps({"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}).encode()
    with RawServer(answering(body)) as server:
        reply = await ask("chat", server.base_url)
    assert reply.finish_reason == "stop" and reply.tool_calls[0].name == "calculate"
    assert (
        reply.tool_calls[0].error
        == "arguments are not JSON: arrays and objects nest 50000 deep, more than the 100 allowed"
    )


def test_json_depth_counts_brackets_outside_strings_only():
    assert json_depth(b'{"a": "[[[\\"]]]", "b": [[1]], "c": "\\\\"}') == 3
    assert json_depth('"[{"') == 0 and json_depth(b"1") == 0
    assert json_depth(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)) == MAX_JSON_DEPTH + 1


# --- Retry-After ------------------------------------------------------------------------------------


def test_retry_after_reads_seconds_and_http_dates():
    now = 1_700_000_000.0
    assert retry_after_s("2", now) == 2.0 and retry_after_s("0.5", now) == 0.5 and retry_after_s("-3", now) == 0.0
    assert retry_after_s(email.utils.formatdate(now + 7, usegmt=True), now) == 7.0
    assert retry_after_s(email.utils.formatdate(now - 7, usegmt=True), now) == 0.0
    assert retry_after_s("soon", now) is None and retry_after_s(None, now) is None


def busy_then(answer: bytes, retry_after: str) -> Script:
    def script(n: int) -> Iterator[bytes | float]:
        if n == 0:
            error = b'{"error": {"message": "rate limited"}}'
            yield head("429 Too Many Requests", Retry_After=retry_after, Content_Length=str(len(error))) + error
        else:
            yield head(Content_Length=str(len(answer))) + answer

    return script


@pytest.mark.parametrize(("kind", "answer"), [("completions", COMPLETION), ("chat", CHAT)])
async def test_429_waits_as_long_as_retry_after_asks(kind, answer):
    with RawServer(busy_then(answer, "1")) as server:
        start = time.monotonic()
        reply = await ask(kind, server.base_url, timeout_s=5.0)
        took = time.monotonic() - start
    assert server.requests == 2
    assert 1.0 <= took < 1.0 + SLACK_S, took  # the backoff alone (0.01 s) would have asked again at once
    assert (reply.token_ids if kind == "completions" else reply.content) == ([5, 6] if kind == "completions" else "hi")


async def test_a_retry_after_past_the_deadline_fails_at_once_naming_it():
    with RawServer(busy_then(COMPLETION, "30")) as server:
        message, took = await timed_failure("completions", server.base_url, timeout_s=3.0)
    assert took < 1.0, took
    assert server.requests == 1
    assert "gave up after attempt 1: the next could start only in 30s" in message
    assert "of engine.timeout_s (3s) are left; last: HTTP 429" in message and "(Retry-After: 30s)" in message


# --- redirects are not followed ------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["302 Found", "307 Temporary Redirect"])
@KINDS
async def test_a_redirect_to_another_host_is_not_followed(kind, status):
    """A server may not send the prompts, and the API key with them, on to another: a 3xx is the
    answer's failure, named by its status, and the place it points to is never asked."""
    with RawServer(answering(COMPLETION if kind == "completions" else CHAT)) as elsewhere:
        moved = b'{"error": {"message": "moved"}}'
        location = elsewhere.base_url + ("/completions" if kind == "completions" else "/chat/completions")

        def script(_n: int) -> Iterator[bytes | float]:
            yield head(status, Location=location, Content_Length=str(len(moved))) + moved

        with RawServer(script) as server:
            message, _ = await timed_failure(kind, server.base_url, timeout_s=5.0, api_key="sk-secret")
    assert f"HTTP {status.split()[0]}" in message and "moved" in message, message
    assert server.requests == 1 and elsewhere.requests == 0
