"""Search-R1's tags reach the core through seams, not workarounds: the ``search`` tool is registered
unlisted (callable, left out of the prompt), the core's own executor runs it (the plugin has no
``invoke_tools``), and the observation is a ``continuation()`` that leaves the conversation as it was."""

from __future__ import annotations

import asyncio
import copy

import pytest
from rlf_deepsearch import plugin
from rlf_deepsearch.formats import INVALID_ACTION
from rlf_deepsearch.search import RetrievalError
from rlf_deepsearch.settings import Settings

from rlfcore import ToolResult, TurnContext, continuation
from rlfcore.testing import ByteChatTokenizer, make_runtime, rollout

STOP = {"sampling": {"stop": ["</search>", "</answer>"]}}


@pytest.mark.parametrize("fmt", ["hermes", "search-r1"])
def test_the_search_tool_is_callable_in_both_formats_and_listed_only_for_hermes(tmp_path, fmt):
    assert not hasattr(plugin, "invoke_tools")
    config = {"plugins": ["deepsearch"], "deepsearch": {"format": fmt, "index_dir": str(tmp_path)}, "rollout": STOP}
    runtime = make_runtime(config)
    assert list(runtime.callable_tools("deepsearch")) == ["search"]
    assert list(runtime.tools_for("deepsearch")) == ([] if fmt == "search-r1" else ["search"])
    search = (
        "<search>red planet</search>"
        if fmt == "search-r1"
        else ('<tool_call>\n{"name": "search", "arguments": {"query": "red planet"}}\n</tool_call>')
    )
    row = {"id": "q", "prompt": "Which planet is red?", "ground_truth": ["Mars"]}
    [t] = rollout(config, [row], {"q": [search, "<answer>Mars</answer>"]})
    assert t.error is None and t.tool_calls == 1 and t.tool_errors == 0 and t.reward == 1.0
    assert ("<tools>" in ByteChatTokenizer().decode(t.prompt_ids)) == (fmt == "hermes")
    if fmt == "hermes":  # the demo corpus's passage reached the model, in the format's own shape
        assert t.messages[2]["role"] == "tool" and "Mars" in t.messages[2]["content"]
    else:
        information = t.messages[1]["content"].split("<information>")[1].split("</information>")[0]
        assert "Mars" in information


def test_the_search_r1_observation_leaves_the_conversation_alone():
    messages = [{"role": "user", "content": "Which planet?"}, {"role": "assistant", "content": "<search>red</search>"}]
    before = copy.deepcopy(messages)
    ctx = TurnContext(
        sample_id="q#0", env="deepsearch", turn=0, messages=messages, tools={}, settings=Settings(format="search-r1")
    )
    found = ToolResult(call_id="call_0", name="search", content="Doc 1(Title: Mars) the red planet\n")
    unreadable = ToolResult(call_id="call_0", name="search", content="Error", error="malformed")
    assert plugin.build_observation([found], ctx) == [
        continuation("\n\n<information>Doc 1(Title: Mars) the red planet</information>\n\n")
    ]
    assert plugin.build_observation([unreadable], ctx) == [continuation(INVALID_ACTION)]
    assert messages == before  # the loop, not the plugin, grows the assistant's turn


def test_the_runs_searcher_lives_in_its_stash_and_shutdown_stops_it(tmp_path):
    from rlf_deepsearch import search as search_module

    assert not hasattr(plugin, "_TOOLS") and not hasattr(search_module, "_SHARED")  # no process-wide caches
    runtime = make_runtime({"plugins": ["deepsearch"], "deepsearch": {"index_dir": str(tmp_path)}})
    searcher = runtime.stash("deepsearch")[plugin.SEARCHER]
    assert searcher.batcher.running == 1  # opened by register_tools, before the first call
    [tool] = runtime.tools["deepsearch"].values()
    assert "Mars" in tool.fn(query="red planet")
    asyncio.run(runtime.aclose())
    assert searcher.batcher.running == 0 and runtime._stashes == {}
    with pytest.raises(RetrievalError, match="closed"):
        searcher.search("red planet", 1)
