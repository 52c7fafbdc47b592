"""Another model as an MCP tool: the model_tool server against a stub OpenAI-compatible endpoint."""

from __future__ import annotations

import sys

import pytest
from mcp_testkit import call, load, settings
from rlf_mcp.pool import shutdown
from rlf_mcp.servers.model_tool import AskError, Endpoint, ask

from rlfcore.testing import OpenAIServer, Reply


def upper_case(body: dict) -> Reply:
    """A model that answers with the question upper-cased; a question "fail" gets HTTP 500."""
    question = body["messages"][-1]["content"]
    return Reply(status=500, raw="model overloaded") if question == "fail" else Reply(question.upper())


@pytest.fixture
def model():
    with OpenAIServer(upper_case) as server:
        yield server


@pytest.fixture
def endpoint(model):
    return model.base_url


def test_ask_sends_a_chat_completion_with_system_prompt_and_key(model, endpoint):
    answer = ask(Endpoint(base_url=endpoint, model="judge-7b", api_key="k", system="Be brief."), "what is mcp?")
    assert answer == "WHAT IS MCP?"
    [request] = model.received
    assert request.path == "/v1/chat/completions" and request.headers["Authorization"] == "Bearer k"
    assert request.body["model"] == "judge-7b" and [m["role"] for m in request.body["messages"]] == ["system", "user"]


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
