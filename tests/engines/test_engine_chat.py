"""``rlf eval`` against a chat-completions API: the real command, the embedded default's real MCP
calculator, and rlfcore.testing's OpenAIServer (its calculator model) standing in for the hosted API on
loopback (no network here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.testing import OpenAIServer, Reply, closed_url
from tests.support import ROOT
from tests.support.rlf import run_rlf

CALCULATOR = ROOT / "examples" / "calculator" / "run.yaml"


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_eval_on_a_chat_api_with_tools_in_the_api_field(tmp_path):
    out_path = tmp_path / "out.jsonl"
    with OpenAIServer() as server:
        out = run_rlf(
            "eval",
            str(CALCULATOR),
            "--greedy",
            "--limit",
            "3",
            "--out",
            str(out_path),
            "engine.name=openai-chat",
            f"engine.base_url={server.base_url}",
            "engine.model=stand-in",
            cwd=ROOT,
        )
        requests = list(server.requests)
    assert out.returncode == 0, out.stdout + out.stderr
    records = _records(out_path)
    assert len(records) == 3  # --greedy: one sample per row
    for r in records:
        assert r["reward"] == 1.0 and r["tool_calls"] == 1 and r["tool_errors"] == 0 and r["stop_reason"] == "answer"
        call = r["messages"][1]["tool_calls"][0]["function"]
        assert call["name"] == "calculate" and isinstance(
            call["arguments"], dict
        )  # objects, as the token loop keeps them
        assert r["messages"][2]["role"] == "tool" and r["messages"][3]["content"] == r["ground_truth"]
        assert r["response_ids"] == [] and r["num_turns"] == 2
    assert len(requests) == 6
    first = next(b for b in requests if len(b["messages"]) == 1)  # rows run concurrently: any order
    second = next(b for b in requests if len(b["messages"]) == 3)
    assert first["model"] == "stand-in" and first["temperature"] == 0 and first["max_tokens"] == 32
    assert [t["function"]["name"] for t in first["tools"]] == ["calculate"]
    assert second["messages"][1]["tool_calls"][0]["function"]["arguments"].startswith('{"expression"')  # a JSON string
    assert second["messages"][2]["role"] == "tool" and second["messages"][2]["tool_call_id"].startswith("call_")
    assert "reward" in out.stdout and "1.000" in out.stdout


def test_eval_on_a_chat_api_with_tool_calls_as_text(tmp_path):
    out_path = tmp_path / "out.jsonl"
    with OpenAIServer() as server:
        out = run_rlf(
            "eval",
            str(CALCULATOR),
            "--greedy",
            "--limit",
            "2",
            "--out",
            str(out_path),
            "--engine",
            "openai-chat",
            f"engine.base_url={server.base_url}",
            "engine.chat_tools=text",
            cwd=ROOT,
        )
        requests = list(server.requests)
    assert out.returncode == 0, out.stdout + out.stderr
    assert all(r["reward"] == 1.0 and r["tool_calls"] == 1 for r in _records(out_path))
    assert all("tools" not in body for body in requests)
    system = requests[0]["messages"][0]
    assert (
        system["role"] == "system" and '"name": "calculate"' in system["content"] and "<tool_call>" in system["content"]
    )
    answer_turn = next(b for b in requests if len(b["messages"]) == 4)["messages"]
    assert answer_turn[2]["content"].startswith("<tool_call>") and "tool_calls" not in answer_turn[2]
    assert answer_turn[3]["role"] == "user" and answer_turn[3]["content"].startswith("<tool_response>\n")


def _project(tmp_path: Path) -> Path:
    rows = [{"id": f"q{i}", "prompt": f"What is {i}+1?", "ground_truth": str(i + 1)} for i in range(2)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text("data: {eval: data.jsonl}\nengine: {name: openai-chat}\n")
    return tmp_path / "run.yaml"


@pytest.mark.parametrize(
    ("case", "cause"),
    [
        ("refused", "rollout ConnectError ×2"),
        ("404", "rollout HTTP 404 ×2"),
        ("401", "rollout HTTP 401 ×2"),
        ("503", "rollout HTTP 503 ×2"),
    ],
)
def test_endpoint_errors_fail_each_sample_and_the_eval(tmp_path, case, cause):
    """No model folder anywhere: a chat engine needs no tokenizer. Each failure is counted by cause."""
    config = _project(tmp_path)
    failing = (
        OpenAIServer(Reply(status=503)) if case == "503" else OpenAIServer(api_key="sk-test" if case == "401" else None)
    )
    with failing as server:
        url = {"refused": closed_url(), "404": server.base_url[: -len("/v1")]}.get(case, server.base_url)
        out = run_rlf("eval", str(config), "--out", str(tmp_path / "out.jsonl"), f"engine.base_url={url}", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"rlf eval: every trajectory failed, nothing was measured. 2 of 2 trajectories failed: {cause}" in out.stderr
    assert "/chat/completions" in out.stderr
    assert len(_records(tmp_path / "out.jsonl")) == 2  # the failed samples are still recorded


def test_training_refuses_a_chat_engine_saying_it_needs_token_ids(tmp_path):
    config = _project(tmp_path)
    (tmp_path / "run.yaml").write_text(
        "data: {train: data.jsonl}\nengine: {name: openai-chat, base_url: 'http://x/v1'}\n"
    )
    out = run_rlf("train", str(config), "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "engine.name: engine 'openai-chat' talks to a chat-completions API" in out.stderr
    assert "not the token ids and logprobs training needs: it is for `rlf eval` only" in out.stderr


def test_api_calls_that_cannot_be_read_are_error_calls_and_odd_answers_are_engine_errors():
    import asyncio

    from rlfcore.engines.base import SamplingParams
    from rlfcore.engines.chat import ChatEngine, _call
    from rlfcore.engines.openai import EngineError

    bad = _call({"id": "c1", "function": {"name": "calculate", "arguments": "{not json"}}, 0)
    assert bad.error is not None and bad.error.startswith("arguments are not JSON") and bad.raw == "{not json"
    listed = _call({"function": {"name": "calculate", "arguments": "[1, 2]"}}, 3)
    assert listed.id == "call_3" and listed.error == "arguments must be a JSON object, got list"
    assert _call({"function": {"name": "f", "arguments": '{"a": 1}'}}, 0).arguments == {"a": 1}
    with pytest.raises(ValueError, match="engine.chat_tools: text describes tools only for rollout.parser"):
        ChatEngine("http://x/v1", tools="text", parser="qwen3-coder")

    filtered = Reply("", finish_reason="content_filter")

    async def ask(url: str) -> None:
        engine = ChatEngine(url, max_retries=0)
        try:
            await engine.chat([{"role": "user", "content": "hi"}], [], SamplingParams())
        finally:
            await engine.close()

    with (
        OpenAIServer(filtered) as server,
        pytest.raises(EngineError, match="unexpected finish_reason 'content_filter'"),
    ):
        asyncio.run(ask(server.base_url))


RAISING_TOOL = '''
from rlfcore import hookimpl, tool


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return {"a": 1}["b"]


@hookimpl
def register_tools(ctx):
    return [calculate]
'''


def test_a_raising_tool_shows_the_model_a_short_message_and_the_author_its_traceback(tmp_path):
    config = _project(tmp_path)
    (tmp_path / "calc.py").write_text(RAISING_TOOL)
    (tmp_path / "run.yaml").write_text(
        "local_plugins: [calc.py]\ndata: {eval: data.jsonl}\nengine: {name: openai-chat}\n"
    )
    with OpenAIServer() as server:
        out = run_rlf(
            "--debug",
            "eval",
            str(config),
            "--out",
            str(tmp_path / "out.jsonl"),
            f"engine.base_url={server.base_url}",
            cwd=tmp_path,
        )
        sent = [b["messages"][-1] for b in server.requests if b["messages"][-1]["role"] == "tool"]
    assert out.returncode == 0, out.stdout + out.stderr
    record = next(r for r in _records(tmp_path / "out.jsonl") if r["row_id"] == "q0")
    assert record["tool_errors"] == 1 and record["tool_error_kinds"] == {"exception": 1}
    assert "KeyError" in record["messages"][2]["content"] and "Traceback" not in record["messages"][2]["content"]
    assert all("Traceback" not in m["content"] and "calc.py" not in m["content"] for m in sent)  # the model's view
    assert 'calc.py", line 8, in calculate' in record["tool_tracebacks"][0]["traceback"]
    assert "tool 'calculate' raised" in out.stderr and 'calc.py", line 8, in calculate' in out.stderr  # --debug
