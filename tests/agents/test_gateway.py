"""The endpoint's own request path, driven through its ASGI application (no sockets, no SDK): routes,
refusals in OpenAI's error shape, streaming; and what every episode of an agent function shares."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest

from rlfcore.agents import gateway as gw
from rlfcore.agents.gateway import Answer, ChatRequest, Choice, Gateway
from rlfcore.agents.programs import FunctionAgent
from rlfcore.agents.rollout import AgentRollout
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.testing import make_runtime
from rlfcore.types import ToolCall
from tests.support import AGENT_PROGRAMS

TOK = ByteChatTokenizer()


class Scripted:
    """An episode's side that answers every request with one fixed choice."""

    ended: str | None = None

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> Answer:
        self.requests.append(request)
        call = ToolCall(id="call_1", name="add", arguments={"a": 2, "b": 3})
        return Answer([Choice("sum:", [call], "tool_calls", 7)], prompt_tokens=11)

    def report(self, reward: float) -> None:
        pass


def request(
    app: Any, method: str, path: str, body: bytes = b"", key: str | None = None, parts: int = 1
) -> tuple[int, dict[bytes, bytes], list[dict[str, Any]]]:
    """Status, headers and the body messages the app sends for one request (its body in ``parts``)."""
    size = -(-len(body) // parts) or 1
    chunks = [body[i : i + size] for i in range(0, max(len(body), 1), size)]
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    asyncio.run(app({"type": "http", "method": method, "path": path, "headers": headers}, receive, send))
    start, *bodies = sent
    return start["status"], dict(start["headers"]), bodies


def body_json(bodies: list[dict[str, Any]]) -> Any:
    return json.loads(b"".join(b["body"] for b in bodies))


def served() -> tuple[Gateway, Scripted, str]:
    gateway = Gateway("127.0.0.1", "policy")
    episode = Scripted()
    return gateway, episode, gateway.add(episode)


CHAT = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "2+3?"}]}).encode()


def test_unknown_routes_and_methods_are_refused_in_openais_error_shape():
    gateway, episode, key = served()
    app = gateway.app()
    status, headers, bodies = request(app, "POST", "/v1/completions", CHAT, key)
    assert status == 404 and headers[b"content-type"] == b"application/json"
    assert (
        body_json(bodies)["error"]["code"] == "not_found"
        and "/v1/chat/completions" in body_json(bodies)["error"]["message"]
    )
    status, headers, bodies = request(app, "GET", "/v1/chat/completions", key=key)
    assert status == 405 and headers[b"allow"] == b"POST"
    assert body_json(bodies)["error"]["code"] == "method_not_allowed"
    assert episode.requests == []


def test_a_chat_completion_is_answered_with_its_length_and_the_episodes_answer():
    gateway, episode, key = served()
    status, headers, bodies = request(gateway.app(), "POST", "/v1/chat/completions", CHAT, key, parts=3)
    raw = b"".join(b["body"] for b in bodies)
    assert status == 200 and headers[b"content-length"] == str(len(raw)).encode()
    reply = json.loads(raw)
    assert reply["object"] == "chat.completion" and reply["model"] == "policy"
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "add",
        "arguments": '{"a": 2, "b": 3}',
    }
    assert reply["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert episode.requests[0].messages == [{"role": "user", "content": "2+3?"}]  # the body arrived whole


def test_a_body_over_the_limit_is_refused_with_413_and_never_parsed(monkeypatch):
    monkeypatch.setattr(gw, "MAX_BODY_BYTES", 64)
    gateway, episode, key = served()
    status, _, bodies = request(gateway.app(), "POST", "/v1/chat/completions", CHAT + b" " * 64, key, parts=4)
    assert status == 413 and body_json(bodies)["error"]["code"] == "request_too_large"
    assert episode.requests == []


def test_a_streamed_answer_is_sent_as_server_sent_events_one_chunk_each():
    gateway, _, key = served()
    streamed = json.dumps({**json.loads(CHAT), "stream": True, "stream_options": {"include_usage": True}}).encode()
    status, headers, bodies = request(gateway.app(), "POST", "/v1/chat/completions", streamed, key)
    assert status == 200 and headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert b"content-length" not in headers  # chunked: each event as it is sent
    assert [b.get("more_body", False) for b in bodies] == [True] * (len(bodies) - 1) + [False]
    events = [b["body"].decode() for b in bodies]
    assert all(e.startswith("data: ") and e.endswith("\n\n") for e in events) and events[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "sum:"}
    assert (
        deltas[2]["tool_calls"][0]["function"]["name"] == "add"
        and chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    )
    assert chunks[-1]["usage"]["total_tokens"] == 18


def test_the_reward_route_takes_a_finite_number_only():
    gateway, _, key = served()
    app = gateway.app()
    assert request(app, "POST", "/v1/rlf/reward", b'{"reward": 0.5}', key)[0] == 200
    status, _, bodies = request(app, "POST", "/v1/rlf/reward", b'{"reward": NaN}', key)
    assert status == 400 and body_json(bodies)["error"]["code"] == "invalid_reward"


def test_every_episode_of_an_agent_function_gets_its_key_on_one_shared_client():
    """The episodes' clients are copies of one (one connection pool, one TLS context); each has its
    own key, and an endpoint at another address is reached there."""
    pytest.importorskip("openai")
    seen: list[Any] = []

    async def agent(_task: dict[str, Any], client: Any) -> str:
        seen.append(client)
        return "done"

    async def go() -> None:
        run = FunctionAgent(agent, timeout_s=5.0)
        for url, key in [
            ("http://127.0.0.1:1/v1", "k1"),
            ("http://127.0.0.1:1/v1", "k2"),
            ("http://127.0.0.1:2/v1", "k3"),
        ]:
            assert (await run({}, url, key)).answer == "done"
        await run.aclose()

    asyncio.run(go())
    assert [(str(c.base_url), c.api_key) for c in seen] == [
        ("http://127.0.0.1:1/v1/", "k1"),
        ("http://127.0.0.1:1/v1/", "k2"),
        ("http://127.0.0.1:2/v1/", "k3"),
    ]
    assert seen[0]._client is seen[1]._client is seen[2]._client


def test_an_agent_rollout_freezes_older_objects_only_while_it_runs():
    """As rlf's own loop: the objects made before the rollout stay out of the collector's full passes
    while it runs (one such pass cost as much as a hundred turns), and are handed back after."""
    runtime = make_runtime({"rollout": {"n": 1}, "agent": {"entry": f"{AGENT_PROGRAMS}:sdk_agent"}}, {})
    engine = ScriptedEngine(TOK, lambda rid, prompt: "5")
    generate, frozen = engine.generate, []

    async def probing(prompt_ids: list[int], params: Any, request_id: str = "") -> Any:
        frozen.append(gc.get_freeze_count())
        return await generate(prompt_ids, params, request_id)

    engine.generate = probing  # type: ignore[method-assign]
    row = normalize_row({"id": "q", "prompt": "What is 2+3?"}, 0)
    assert gc.get_freeze_count() == 0
    try:
        [t] = runtime.run(AgentRollout(runtime, engine, TOK).run([row]))
    finally:
        runtime.close()
    assert t.stop_reason == "answer" and t.answer == "5", t.error
    assert frozen and all(n > 0 for n in frozen)
    assert gc.get_freeze_count() == 0
