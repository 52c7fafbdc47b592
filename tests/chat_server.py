"""An OpenAI-compatible chat-completions server on loopback that solves calculator questions, standing
in for a hosted API in ``rlf eval`` tests (no network, no model here).

It answers ``POST /v1/chat/completions`` as OpenAI's API does, with tool calls the way the request asks
for them: when the request has ``tools``, in the answer's ``tool_calls`` field (arguments as a JSON
string); without, as Hermes ``<tool_call>`` text in the content. A user question "What is A op B?" gets
a call of ``calculate``; a tool result (a ``tool`` message, or a user message of ``<tool_response>``)
gets its content as the answer. Knobs: ``status`` (every answer is that HTTP error), ``api_key``
(requests without ``Bearer KEY`` get 401). tests/openai_server.py stands in for the completions route
(token ids); plugins/rlf-judge-qwq/tests/qwq_chat_server.py answers a judge's verdicts without tools.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from openai_server import LoopbackServer

_QUESTION = re.compile(r"What is (-?\d+\s*[-+*/]\s*-?\d+)\?")
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


class ChatServer(LoopbackServer):
    def __init__(self, status: int = 200, api_key: str | None = None):
        self.status = status
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._use_handler(_handler(self))

    def message(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message answering the request's last message."""
        last = body["messages"][-1]
        content = last.get("content") or ""
        result = content if last["role"] == "tool" else next(iter(_RESPONSE.findall(content)), None)
        if result is not None:
            return {"role": "assistant", "content": result.strip()}
        question = _QUESTION.search(content)
        if question is None:
            return {"role": "assistant", "content": "I do not know."}
        arguments = {"expression": question.group(1).replace(" ", "")}
        if body.get("tools"):
            call = {
                "id": f"call_{len(self.requests)}",
                "type": "function",
                "function": {"name": "calculate", "arguments": json.dumps(arguments)},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        text = json.dumps({"name": "calculate", "arguments": arguments})
        return {"role": "assistant", "content": f"<tool_call>\n{text}\n</tool_call>"}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        message = self.message(body)
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stand-in"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
        }


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with server._lock:
                server.requests.append(body)
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                return self._send(401, {"error": {"message": "Incorrect API key provided"}})
            if server.status != 200:
                return self._send(server.status, {"error": {"message": f"simulated HTTP {server.status}"}})
            self._send(200, server.answer(body))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
