"""A small OpenAI-compatible completions server on loopback, standing in for vLLM in tests.

vLLM and SGLang cannot run here (no GPU, no model hub), so this stdlib server answers
``POST /v1/completions`` the way vLLM does, with deterministic output: the continuation of a prompt
ending in token ``x`` is ``x+1, x+2, ...`` (mod ``vocab``), the k-th token's logprob is ``-k/100``,
and generation stops at the first token in the request's ``stop_token_ids`` or at ``eos_id``.

Use it as a context manager; ``base_url`` ends in ``/v1``. Knobs for failure tests: ``failures``
(HTTP statuses answered to the next requests, one each), ``delay_s`` (before answering),
``omit_stop`` (leave the stop token out of the ids, as vLLM may for EOS) and ``style``:
``vllm`` (``logprobs.tokens`` as ``token_id:N``), ``token_ids`` (only ``choices[0].token_ids``, no
logprobs) or ``text`` (only the text, each id < 256 as one character).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackServer:
    """A stdlib HTTP server on 127.0.0.1 with a free port, serving on its own thread inside ``with``;
    the stand-ins of the completions and chat routes share it."""

    def _use_handler(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._handler_class = handler
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "the server is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> Self:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class CompletionsServer(LoopbackServer):
    def __init__(self, vocab: int = 300, eos_id: int | None = None, style: str = "vllm"):
        self.vocab = vocab
        self.eos_id = eos_id
        self.style = style
        self.failures: list[int] = []
        self.delay_s = 0.0
        self.omit_stop = False
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._use_handler(_handler(self))

    def continuation(self, body: dict[str, Any]) -> tuple[list[int], str, int | None]:
        """The ids this server generates for a request, its finish reason and vLLM's stop_reason."""
        stops = set(body.get("stop_token_ids") or [])
        last = body["prompt"][-1]
        ids: list[int] = []
        while len(ids) < body.get("max_tokens", 16):
            last = (last + 1) % self.vocab
            ids.append(last)
            if last == self.eos_id:
                return ids, "stop", None  # vLLM names no stop_reason for EOS
            if last in stops:
                return ids, "stop", last
        return ids, "length", None

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        ids, finish, stop_reason = self.continuation(body)
        if finish == "stop" and self.omit_stop:
            ids = ids[:-1]
        choice: dict[str, Any] = {
            "index": 0,
            "text": "".join(chr(i) for i in ids if i < 256),
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop_reason,
        }
        if self.style == "vllm":
            choice["logprobs"] = {
                "tokens": [f"token_id:{i}" for i in ids],
                "token_logprobs": [-(k + 1) / 100 for k in range(len(ids))],
                "top_logprobs": [{f"token_id:{i}": -(k + 1) / 100} for k, i in enumerate(ids)],
                "text_offset": list(range(len(ids))),
            }
        elif self.style == "token_ids":
            choice["token_ids"] = ids
        return {
            "id": f"cmpl-{len(self.requests)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "tiny"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)},
        }


def _handler(server: CompletionsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with server._lock:
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                failure = server.failures.pop(0) if server.failures else None
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                time.sleep(server.delay_s)
                if self.path != "/v1/completions":
                    self._send(404, {"error": f"no route {self.path}"})
                elif failure is not None:
                    self._send(failure, {"error": {"message": f"simulated failure {failure}"}})
                else:
                    self._send(200, server.answer(body))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)
            finally:
                with server._lock:
                    server.in_flight -= 1

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
