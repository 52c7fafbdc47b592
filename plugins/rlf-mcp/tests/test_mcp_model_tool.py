"""Another model as an MCP tool: the model_tool server against a stub OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mcp_testkit import call, load, settings
from rlf_mcp.pool import shutdown
from rlf_mcp.servers.model_tool import AskError, Endpoint, ask


class StubModel(BaseHTTPRequestHandler):
    """Answers chat completions with the question upper-cased; a question "fail" gets HTTP 500."""

    seen: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StubModel.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        question = body["messages"][-1]["content"]
        if question == "fail":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model overloaded")
            return
        reply = {"choices": [{"message": {"role": "assistant", "content": question.upper()}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_ask_sends_a_chat_completion_with_system_prompt_and_key(endpoint):
    StubModel.seen.clear()
    answer = ask(Endpoint(base_url=endpoint, model="judge-7b", api_key="k", system="Be brief."), "what is mcp?")
    assert answer == "WHAT IS MCP?"
    [request] = StubModel.seen
    assert (
        request["path"] == "/v1/chat/completions" and request["model"] == "judge-7b" and request["auth"] == "Bearer k"
    )
    assert [m["role"] for m in request["messages"]] == ["system", "user"]


def test_ask_errors_say_what_the_endpoint_did(endpoint):
    with pytest.raises(AskError, match="HTTP 500: model overloaded"):
        ask(Endpoint(base_url=endpoint, model="m"), "fail")
    with pytest.raises(AskError, match="cannot reach the model endpoint at http://127.0.0.1:9/v1/chat/completions"):
        ask(Endpoint(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=2), "hello")


def test_the_model_as_an_mcp_tool_over_stdio(endpoint):
    entry = {
        "command": sys.executable,
        "args": ["-m", "rlf_mcp.servers.model_tool", "--model", "helper", "--description", "Ask the helper model."],
        "env": {"RLF_MODEL_TOOL_BASE_URL": endpoint},
        "prefix": "helper_",
    }
    try:
        tools = load(settings(helper=entry))
        assert list(tools) == ["helper_ask"] and tools["helper_ask"].description == "Ask the helper model."
        assert call(tools, "helper_ask", question="capital of france?").content == "CAPITAL OF FRANCE?"
        failed = call(tools, "helper_ask", question="fail")
        assert failed.error == "exception" and "HTTP 500: model overloaded" in failed.content
    finally:
        shutdown()
