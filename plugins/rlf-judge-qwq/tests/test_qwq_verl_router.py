"""The judge verl serves: rlf's verl reward function hands the reward router's address to the judge.

With ``reward.reward_model.enable=true`` verl starts the judge's servers behind a router and passes
``reward_router_address`` to the custom reward function. A judge-qwq section with no endpoints of its
own then asks that router. The stdlib chat server stands in for the router (verl's router only
forwards paths to vLLM servers, which cannot run here).
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")

from rlfcore.testing import OpenAIServer


def _trace(answer: str) -> dict:
    return {
        "id": "q#0",
        "row_id": "q",
        "env": None,
        "stop_reason": "answer",
        "num_turns": 1,
        "tool_calls": 0,
        "messages": [{"role": "user", "content": "What is 6 x 7?"}, {"role": "assistant", "content": answer}],
        "ground_truth": "42",
    }


def test_a_judge_without_endpoints_asks_verls_reward_router(tmp_path):
    # verl calls this function by its file path (reward.custom_reward_function.path): the test calls it as verl does
    from rlfcore.backends.verl.reward import compute_score  # noqa: TID251

    (tmp_path / "run.yaml").write_text(
        "plugins: [judge-qwq]\njudge-qwq: {model: judge, retries: 0, parse_retries: 0, timeout_s: 5}\n"
        "reward: {weights: {judge: 1.0}}\n"
    )
    with OpenAIServer("<think>\nok\n</think>\nVERDICT: 8") as server:
        address = server.base_url.removeprefix("http://").removesuffix("/v1")

        async def score(**router):
            return await compute_score(
                "calc", "42", "42", {"rlf": _trace("42")}, rlf_config=str(tmp_path / "run.yaml"), **router
            )

        without = asyncio.run(score())
        with_router = asyncio.run(score(reward_router_address=address))
        with_url = asyncio.run(score(reward_router_address=server.base_url))  # a URL is taken as it is
    assert without == {"score": 0.0, "rlf_error": 0.0}  # no judge to ask: the judge adds nothing
    assert with_router == with_url == {"score": 0.8, "rlf_error": 0.0}
    assert len(server.requests) == 2 and {r["model"] for r in server.requests} == {"judge"}
