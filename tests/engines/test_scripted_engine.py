"""The scripted engine picks each trajectory's script, with the real loop and the byte tokenizer."""

from __future__ import annotations

import asyncio

from rlfcore import Score, hookimpl, tool
from rlfcore.chat import ByteChatTokenizer
from rlfcore.engines.base import SamplingParams
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.testing import rollout

CALL = '<tool_call>\n{"name": "double", "arguments": {"x": 21}}\n</tool_call>'


class Doubler:
    @hookimpl
    def register_tools(self, ctx):
        @tool
        def double(x: int) -> int:
            """Twice x."""
            return 2 * x

        return [double]

    @hookimpl
    def compute_score(self, sample):
        return Score(value=float(sample.response == str(sample.ground_truth)))


def test_a_row_id_containing_a_hash_gets_its_own_script():
    """The loop names trajectories ``ROW#k``; a row id with ``#`` in it must still find its script."""
    rows = [
        {"id": "orders#2024", "prompt": "Double 21.", "ground_truth": "42"},
        {"id": "orders", "prompt": "Double 21.", "ground_truth": "42"},
    ]
    script = {"orders#2024": [CALL, "42"], "orders": ["no idea"]}
    trajectories = rollout({"plugins": ["doubler"], "rollout": {"n": 2}}, rows, script, plugins={"doubler": Doubler()})
    by_row = {}
    for t in trajectories:
        by_row.setdefault(t.row_id, []).append(t)
    assert sorted(t.id for t in by_row["orders#2024"]) == ["orders#2024#0", "orders#2024#1"]
    assert [(t.tool_calls, t.reward) for t in by_row["orders#2024"]] == [(1, 1.0), (1, 1.0)]
    assert [(t.tool_calls, t.reward) for t in by_row["orders"]] == [(0, 0.0), (0, 0.0)]


def test_a_trajectory_id_script_wins_over_its_row_script():
    tokenizer = ByteChatTokenizer()
    engine = ScriptedEngine(tokenizer, {"q#1": ["one"], "q": ["any"]})
    params = SamplingParams(max_tokens=16)

    def text(request_id: str) -> str:
        gen = asyncio.run(engine.generate(tokenizer.encode("hi"), params, request_id=request_id))
        return tokenizer.decode(gen.token_ids[:-1])

    assert (text("q#0"), text("q#1")) == ("any", "one")
