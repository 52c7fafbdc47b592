"""OpenAIEngine against a real HTTP server on loopback.

vLLM itself cannot run here (no GPU, no model hub), so a small OpenAI-compatible completions server
(rlfcore.testing's OpenAIServer) stands in: it answers over real HTTP with vLLM-shaped responses and
deterministic tokens, and can fail, stall or omit the stop token on demand.
"""

from __future__ import annotations

import asyncio
import re

import pytest

pytest.importorskip("httpx")

from rlfcore.chat import ByteChatTokenizer
from rlfcore.config import EngineConfig
from rlfcore.engines.base import SamplingParams
from rlfcore.engines.openai import EngineError, OpenAIEngine, parse_choice
from rlfcore.testing import OpenAIServer, Reply, closed_url, counting


def engine_for(server: OpenAIServer, **kwargs) -> OpenAIEngine:
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAIEngine(server.base_url, "tiny", **kwargs)


async def test_ids_logprobs_and_request_body():
    with OpenAIServer() as server:
        engine = engine_for(server, api_key="sk-test")
        params = SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_tokens=5, seed=7, stop_token_ids=[290])
        gen = await engine.generate([1, 2, 10], params, request_id="traj-1")
        await engine.close()
    assert gen.token_ids == [11, 12, 13, 14, 15] and gen.finish_reason == "length"
    assert gen.logprobs == [-0.01, -0.02, -0.03, -0.04, -0.05]
    body = server.requests[0]
    assert body["prompt"] == [1, 2, 10] and body["model"] == "tiny"
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (
        5,
        0.6,
        0.95,
        20,
        7,
    )
    assert body["stop_token_ids"] == [290] and body["logprobs"] == 1
    assert body["return_tokens_as_token_ids"] is True and body["skip_special_tokens"] is False
    assert server.received[0].headers["Authorization"] == "Bearer sk-test"


async def test_defaults_leave_out_top_k_and_seed():
    with OpenAIServer() as server:
        engine = OpenAIEngine(server.base_url + "/")  # a trailing slash and no model name
        await engine.generate([3], SamplingParams(max_tokens=2))
        await engine.close()
    body = server.requests[0]
    assert "top_k" not in body and "seed" not in body and "model" not in body
    assert "Authorization" not in server.received[0].headers


async def test_stop_token_is_included():
    with OpenAIServer() as server:
        engine = engine_for(server)
        gen = await engine.generate([40], SamplingParams(max_tokens=10, stop_token_ids=[43, 299]))
        await engine.close()
    assert gen.finish_reason == "stop"
    assert gen.token_ids == [41, 42, 43] and gen.logprobs == [-0.01, -0.02, -0.03]


async def test_stop_token_omitted_by_the_server_is_appended():
    with OpenAIServer(completions=counting(eos_id=45, omit_stop=True)) as server:
        engine = engine_for(server)
        named = await engine.generate([40], SamplingParams(max_tokens=10, stop_token_ids=[299, 43]))
        eos = await engine.generate([40], SamplingParams(max_tokens=10, stop_token_ids=[45, 299]))
        await engine.close()
    # stop_reason names 43: that id is appended, with logprob 0.0 (the server gave none).
    assert named.token_ids == [41, 42, 43] and named.logprobs == [-0.01, -0.02, 0.0]
    # EOS (no stop_reason): the first stop id is appended.
    assert eos.token_ids == [41, 42, 43, 44, 45] and eos.finish_reason == "stop"
    assert len(eos.logprobs) == 5


async def test_ids_from_token_ids_field_without_logprobs():
    with OpenAIServer(completions=counting(ids_in="token_ids")) as server:
        engine = engine_for(server)
        gen = await engine.generate([7], SamplingParams(max_tokens=3))
        await engine.close()
    assert gen.token_ids == [8, 9, 10] and gen.logprobs is None


async def test_text_only_server_needs_a_tokenizer():
    tok = ByteChatTokenizer()
    # the text leaves out the end of turn
    with OpenAIServer(completions=counting(eos_id=ord("d"), ids_in="text", omit_stop=True)) as server:
        engine = engine_for(server, tokenizer=tok)
        gen = await engine.generate(tok.encode("xa"), SamplingParams(max_tokens=10, stop_token_ids=tok.eos_token_ids))
        bare = engine_for(server)
        with pytest.raises(EngineError, match="no token ids.*tokenizer"):
            await bare.generate([97], SamplingParams(max_tokens=3))
        await engine.close()
        await bare.close()
    assert gen.token_ids == [*tok.encode("bc"), tok.eos_token_ids[0]] and gen.finish_reason == "stop"
    assert gen.logprobs is None


async def test_retries_after_503_then_succeeds():
    with OpenAIServer() as server:
        server.script = [Reply(status=503), Reply(status=502)]
        engine = engine_for(server, max_retries=3)
        gen = await engine.generate([1], SamplingParams(max_tokens=2))
        await engine.close()
    assert gen.token_ids == [2, 3]
    assert len(server.requests) == 3


async def test_persistent_500_fails_clearly_after_retries():
    with OpenAIServer() as server:
        server.script = [Reply(status=500)] * 10
        engine = engine_for(server, max_retries=2)
        with pytest.raises(EngineError) as info:
            await engine.generate([1], SamplingParams(max_tokens=2))
        await engine.close()
    message = str(info.value)
    assert server.base_url + "/completions" in message
    assert "HTTP 500" in message and "scripted HTTP 500" in message and "3 attempts" in message
    assert len(server.requests) == 3


async def test_client_errors_are_not_retried():
    with OpenAIServer() as server:
        server.script = [Reply(status=400)]
        engine = engine_for(server, max_retries=3)
        with pytest.raises(EngineError, match="HTTP 400"):
            await engine.generate([1], SamplingParams(max_tokens=2))
        await engine.close()
    assert len(server.requests) == 1


async def test_timeout_fails_without_retrying():
    with OpenAIServer(delay_s=1.0) as server:
        engine = engine_for(server, timeout_s=0.2, max_retries=3)
        with pytest.raises(EngineError, match=r"within 0.2s \(timed out\).*'slow'"):
            await engine.generate([1], SamplingParams(max_tokens=2), request_id="slow")
        await engine.close()
        assert len(server.requests) == 1


async def test_unreachable_server_fails_after_retries():
    url = closed_url()
    engine = OpenAIEngine(url, backoff_s=0.01, max_retries=1)
    with pytest.raises(EngineError, match=rf"{re.escape(url)}/completions: failed after 2 attempts; last: Connect"):
        await engine.generate([1], SamplingParams(max_tokens=2))
    await engine.close()


async def test_sixteen_concurrent_calls():
    with OpenAIServer(delay_s=0.05) as server:
        engine = engine_for(server)
        gens = await asyncio.gather(*(engine.generate([i * 10], SamplingParams(max_tokens=3)) for i in range(16)))
        await engine.close()
    assert [g.token_ids for g in gens] == [[i * 10 + 1, i * 10 + 2, i * 10 + 3] for i in range(16)]
    assert len(server.requests) == 16 and server.max_in_flight > 1


def test_from_config_and_unexpected_finish_reason():
    tok = ByteChatTokenizer()
    engine = OpenAIEngine.from_config(
        EngineConfig(name="openai", base_url="http://h:8000/v1", model="m", api_key="k", timeout_s=5), tok
    )
    assert (engine.url, engine.model, engine.api_key, engine.timeout_s) == ("http://h:8000/v1/completions", "m", "k", 5)
    assert engine.tokenizer is tok
    with pytest.raises(ValueError, match="engine.base_url"):
        OpenAIEngine.from_config(EngineConfig(name="openai"))
    with pytest.raises(EngineError, match="unexpected finish_reason 'abort'"):
        parse_choice({"finish_reason": "abort", "token_ids": [1]}, SamplingParams())


def test_one_engine_serves_successive_event_loops():
    """A trainer may run each rollout under its own asyncio.run, closing the engine's pool at the end."""
    with OpenAIServer() as server:
        engine = engine_for(server)

        async def rollout():
            try:
                return await engine.generate([5], SamplingParams(max_tokens=2))
            finally:
                await engine.close()

        runs = [asyncio.run(rollout()) for _ in range(2)]
    assert [g.token_ids for g in runs] == [[6, 7], [6, 7]]


async def test_stop_strings_are_sent_and_a_stop_string_stop_appends_nothing():
    with OpenAIServer() as server:
        engine = engine_for(server)
        await engine.generate([40], SamplingParams(max_tokens=3, stop=["</search>"]))
        await engine.close()
    assert server.requests[0]["stop"] == ["</search>"] and server.requests[0]["include_stop_str_in_output"] is True
    params = SamplingParams(max_tokens=10, stop_token_ids=[299], stop=["</search>"])
    for key in ("stop_reason", "matched_stop"):  # vLLM's and SGLang's names for the string that matched
        choice = {
            "finish_reason": "stop",
            key: "</search>",
            "token_ids": [41, 42],
            "logprobs": {"token_logprobs": [-0.1, -0.2]},
        }
        gen = parse_choice(choice, params, ByteChatTokenizer())
        assert gen.token_ids == [41, 42] and gen.logprobs == [-0.1, -0.2] and gen.finish_reason == "stop"
