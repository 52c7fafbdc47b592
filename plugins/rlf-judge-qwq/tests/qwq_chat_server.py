"""A small OpenAI-compatible chat-completions server on loopback, standing in for vLLM serving QwQ-32B.

Real vLLM cannot serve a model in these tests (no GPU, no model hub), so this stdlib server answers
``POST /v1/chat/completions`` in vLLM's format with answers each test scripts: a reasoning model's
``<think> ... </think>`` then its verdict, the reasoning split off into ``reasoning_content`` (as
vLLM's ``--reasoning-parser`` does), garbage, delays, HTTP errors. Answers come from ``script`` (one
per request, in order) and then from ``answer(body)``. ``closed_url()`` gives the URL of a server that
is down.

Run it as a script for the benchmark: ``python qwq_chat_server.py --delay-s 0.05`` prints its base URL
and answers every request with a fixed verdict after the fixed delay, until killed.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. ``raw`` replaces the whole body (for answers that are not JSON)."""

    content: str | None = "<think>\nFine.\n</think>\n\nVERDICT: 7"
    status: int = 200
    delay_s: float = 0.0
    finish_reason: str = "stop"
    reasoning: str | None = None
    raw: str | None = None
    trickle_s: float = 0.0
    """Seconds between the bytes of the body: an endpoint that is alive but all but stalled."""


Answer = Reply | str


class ChatServer:
    def __init__(
        self, answer: Callable[[dict[str, Any]], Answer] | None = None, delay_s: float = 0.0, record: bool = True
    ):
        self.answer = answer or (lambda body: Reply())
        self.delay_s = delay_s
        self.record = record
        self.script: list[Answer] = []
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "the server is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def prompt(self, i: int = -1) -> str:
        """The user message of the i-th request received."""
        return self.requests[i]["messages"][-1]["content"]

    def start(self, port: int = 0) -> ChatServer:
        self._httpd = _Server(("127.0.0.1", port), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is not None and self._thread is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._httpd = self._thread = None

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reply_to(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self.record:
                self.requests.append(body)
            scripted = self.script.pop(0) if self.script else None
        got = scripted if scripted is not None else self.answer(body)
        return Reply(content=got) if isinstance(got, str) else got


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the stdlib's 5 drops connections when 64 clients connect at once


def closed_url() -> str:
    """The base URL of a loopback port nobody listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server

        def setup(self) -> None:
            super().setup()
            # answer at once: without this, Nagle's algorithm and delayed ACKs add ~40 ms per request
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, json.dumps({"error": f"no route {self.path}"}))
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, json.dumps({"error": "body is not JSON"}))
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                reply = server.reply_to(body)
                time.sleep(server.delay_s + reply.delay_s)
                if reply.status != 200:
                    return self._send(reply.status, json.dumps({"error": f"scripted HTTP {reply.status}"}))
                self._send(
                    200, reply.raw if reply.raw is not None else json.dumps(completion(body, reply)), reply.trickle_s
                )
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

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-s", type=float, default=0.05, help="fixed latency of every answer")
    parser.add_argument("--verdict", default="<think>\nThe response is right.\n</think>\n\nVERDICT: 7")
    args = parser.parse_args()
    server = ChatServer(lambda body: Reply(content=args.verdict), delay_s=args.delay_s, record=False).start()
    print(server.base_url, flush=True)
    try:
        sys.stdin.read()  # serve until the parent closes our stdin or kills us
    finally:
        server.close()


if __name__ == "__main__":
    main()
