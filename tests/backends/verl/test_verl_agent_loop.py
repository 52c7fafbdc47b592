"""The rlf_agent loop inside verl's real agent-loop worker, with a scripted LLM server client.

The batch comes from verl's own dataset class reading the converted parquet; rewards come back
through verl's reward-loop worker and reward manager calling the rlf reward function.
"""

from __future__ import annotations

import asyncio
import types
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")

from tests.support import AGENT_PROGRAMS
from tests.support.samples import ADDER_PLUGIN
from tests.support.verl_backend import CALL, LOGPROB, TEXTS, ScriptedServerClient, write_run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    return build_tiny(TEXTS, tmp_path_factory.mktemp("tiny") / "model", vocab_size=300)


@pytest.fixture(scope="module")
def plan(tiny, tmp_path_factory):
    from rlfcore.backends.verl.launch import prepare

    tmp = tmp_path_factory.mktemp("run")
    config = write_run(tmp, tiny)
    return prepare(config, [], ["actor_rollout_ref.rollout.agent.num_workers=1"], tmp / "out")


class _RemoteMethod:
    """``handle.method.remote(...)`` for an in-process object, as the worker calls Ray actors."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


class _InProcessRewardHandle:
    def __init__(self, worker):
        self.compute_score = _RemoteMethod(worker.compute_score)


def _batch(plan, tokenizer):
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(str(plan.train_file), tokenizer, plan.config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    return batch.repeat(plan.config.actor_rollout_ref.rollout.n, interleave=True)


def test_agent_loop_through_verls_worker(plan):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    import rlfcore.backends.verl.plugin  # noqa: F401  (what verl's entry point imports)

    cfg = plan.config

    async def scenario():  # verl's workers keep the event loop they were built in: build them in this one
        reward_worker = RewardLoopWorker(cfg)
        worker = AgentLoopWorker(
            cfg, llm_client=None, reward_loop_worker_handles=[_InProcessRewardHandle(reward_worker)]
        )
        worker.llm_client = ScriptedServerClient(worker.tokenizer)
        batch = _batch(plan, worker.tokenizer)
        return worker, batch, await worker.generate_sequences(batch)

    worker, batch, out = asyncio.run(scenario())
    client = worker.llm_client

    tok = worker.tokenizer
    n = len(batch)
    assert n == 8 and out.batch["responses"].shape == (n, cfg.actor_rollout_ref.rollout.response_length)
    for i in range(n):
        mask = out.batch["response_mask"][i]
        logprobs = out.batch["rollout_log_probs"][i]
        valid = int(out.batch["attention_mask"][i, cfg.data.max_prompt_length :].sum())
        response = out.batch["responses"][i, :valid].tolist()
        # generated tokens (mask 1) carry the server's logprobs; the tool observation (mask 0) carries none
        assert mask[:valid].tolist().count(0) > 0 and mask[valid:].sum() == 0
        assert all(abs(lp - LOGPROB) < 1e-6 for lp in logprobs[mask.bool()].tolist())
        assert all(lp == 0 for lp in logprobs[~mask.bool()].tolist())
        text = tok.decode(response)
        assert "<tool_call>" in text and "<tool_response>\n5\n</tool_response>" in text
        trace = out.non_tensor_batch["rlf"][i]
        assert trace["stop_reason"] == "answer" and trace["tool_calls"] == 1 and trace["env"] == "adder"
        assert [m["role"] for m in trace["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert trace["messages"][2]["content"] == "5"
        row = int(trace["row_id"][1:])
        expected = 1.0 if row % 2 == 0 else 0.0
        assert out.non_tensor_batch["score"][i] == expected
        assert out.non_tensor_batch["rlf_error"][i] == 0.0
        assert out.batch["rm_scores"][i].sum().item() == expected
        assert out.batch["rm_scores"][i, valid - 1].item() == expected
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2] * n
    # every request asked for logprobs and a per-turn budget from the rlf loop
    assert all(
        r["sampling_params"]["logprobs"] is True and r["sampling_params"]["max_tokens"] <= 64 for r in client.requests
    )
    # the two turns of one trajectory share a request id (verl's sticky sessions keep its prefix cache)
    assert len(client.turns) == n and all(v == 2 for v in client.turns.values())


def test_weight_versions_reach_verls_trainer(plan):
    """verl's default trainer (``use_v1``) stacks ``min_global_steps``/``max_global_steps`` from every
    trajectory's ``extra_fields`` as ints; a loop that drops them crashes it at the end of step 1.
    Here verl's real ``LLMServerClient`` stamps the versions of a server whose weights moved between
    the two turns: the trajectory starts at version 3 and ends at 4."""
    import numpy as np
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.workers.rollout.llm_server import LLMServerClient

    import rlfcore.backends.verl.plugin  # noqa: F401
    from tests.support.verl_backend import InProcessLoadBalancer, ScriptedVllmServer

    cfg = plan.config

    async def scenario():
        reward_worker = RewardLoopWorker(cfg)
        worker = AgentLoopWorker(
            cfg, llm_client=None, reward_loop_worker_handles=[_InProcessRewardHandle(reward_worker)]
        )
        server = ScriptedVllmServer(worker.tokenizer, versions=(3, 4))
        worker.llm_client = LLMServerClient(cfg, load_balancer_handle=InProcessLoadBalancer(server))
        return await worker.generate_sequences(_batch(plan, worker.tokenizer))

    out = asyncio.run(scenario())
    extra = out.non_tensor_batch
    # what verl/trainer/ppo/v1/trainer_base.py does with them
    assert np.array(extra["min_global_steps"].tolist(), dtype=int).tolist() == [3] * 8
    assert np.array(extra["max_global_steps"].tolist(), dtype=int).tolist() == [4] * 8
    assert all(trace["tool_calls"] == 1 for trace in extra["rlf"])
    assert sorted(extra["score"].tolist()) == [0.0] * 4 + [1.0] * 4


def test_reward_without_trace_names_the_problem():
    from rlfcore.backends.verl.reward import compute_score

    with pytest.raises(ValueError, match="rlf_agent"):
        asyncio.run(compute_score("adder", "5", "5", {"index": 0}, rlf_config="run.yaml"))


def test_runtime_is_built_once_and_a_bad_config_fails_loudly_once(tmp_path, caplog):
    from rlfcore.backends.verl.shared import shared_runtime

    (tmp_path / "good.yaml").write_text("rollout: {n: 2}\n")
    (tmp_path / "bad.yaml").write_text("rollout: {n: 0}\n")

    async def scenario():
        a, b = await asyncio.gather(
            shared_runtime(str(tmp_path / "good.yaml")), shared_runtime(str(tmp_path / "good.yaml"))
        )
        c = await shared_runtime(str(tmp_path / "good.yaml"), ["rollout.n=3"])
        failures = []
        for _ in range(2):
            try:
                await shared_runtime(str(tmp_path / "bad.yaml"))
            except Exception as exc:
                failures.append(exc)
        return a, b, c, failures

    a, b, c, failures = asyncio.run(scenario())
    assert a is b and c is not a and c.config.rollout.n == 3
    assert len(failures) == 2 and "rollout.n" in str(failures[0])
    assert [r.levelname for r in caplog.records if "cannot load the run config" in r.message] == ["ERROR"]


def _tool_rollout(tiny, builder_cls):
    """One trajectory of the adder plugin through rlf's loop with verl's continuous-token builder ``builder_cls``."""
    from transformers import AutoTokenizer

    from rlfcore.backends.verl.bridge import ContinuousTokens
    from rlfcore.chat import HFChatTokenizer
    from rlfcore.data import normalize_row
    from rlfcore.engines.scripted import ScriptedEngine
    from rlfcore.loop import Rollout
    from rlfcore.testing import make_runtime

    adder = types.ModuleType("adder")
    exec(ADDER_PLUGIN, adder.__dict__)
    runtime = make_runtime({"plugins": ["adder"], "rollout": {"n": 1}}, plugins={"adder": adder})
    hf = AutoTokenizer.from_pretrained(tiny)
    tok = HFChatTokenizer(hf)
    engine = ScriptedEngine(tok, {"q0": [CALL, "5"]})
    loop = Rollout(runtime, engine, tok, ContinuousTokens(builder_cls(hf)) if builder_cls else None)
    row = normalize_row({"id": "q0", "prompt": "What is 2 plus 3?", "ground_truth": "5"}, 0)
    return tok, asyncio.run(loop.trajectory(row, "q0"))


def test_continuous_tokens_match_rlfs_own_sequences(tiny):
    """For a Qwen-family model verl's builder and rlf's sequence builder agree token for token."""
    from verl.utils.tokenizer.continuous_token import QwenContinuousTokenBuilder

    _, ours = _tool_rollout(tiny, None)
    tok, verls = _tool_rollout(tiny, QwenContinuousTokenBuilder)
    assert verls.stop_reason == "answer" and verls.tool_calls == 1
    assert verls.prompt_ids == ours.prompt_ids
    assert verls.response_ids == ours.response_ids and verls.response_mask == ours.response_mask
    assert "<|im_end|>\n<|im_start|>user\n<tool_response>" in tok.decode(verls.response_ids)


def test_tokens_a_builder_drops_leave_with_their_mask_and_logprobs(tiny):
    """verl's GLM-style builders drop a generated stop token that also opens the next turn; the loop
    must drop its mask and logprob too, keeping the three lists aligned."""
    from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, MergeResult

    class DropsStopToken(ContinuousTokenBuilder):  # the boundary rule of verl's GLMContinuousTokenBuilder
        def _merge_context_token_ids(self, runtime_token_ids, appended_token_ids, **kwargs):
            end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
            drop = 1 if runtime_token_ids and runtime_token_ids[-1] == end else 0
            return MergeResult(
                token_ids=list(runtime_token_ids[: len(runtime_token_ids) - drop]) + list(appended_token_ids),
                appended_token_count=len(appended_token_ids),
                kind="context",
                removed_prefix_token_count=drop,
            )

    _, ours = _tool_rollout(tiny, None)
    tok, dropped = _tool_rollout(tiny, DropsStopToken)
    end = tok.tok.convert_tokens_to_ids("<|im_end|>")
    assert dropped.stop_reason == "answer"
    assert len(dropped.response_ids) == len(dropped.response_mask) == len(dropped.logprobs)
    first_turn = ours.response_mask.index(0)  # ours keeps the first turn's stop token
    assert ours.response_ids[first_turn - 1] == end
    assert dropped.response_ids[: first_turn - 1] == ours.response_ids[: first_turn - 1]
    assert dropped.response_mask[first_turn - 1] == 0  # the next turn starts here, not the dropped token
    assert sum(dropped.response_mask) == sum(ours.response_mask) - 1


CLOSER_PLUGIN = """
import os
from rlfcore import hookimpl


@hookimpl
def shutdown(ctx):
    with open(os.environ["CLOSED_FILE"], "a") as f:
        f.write("closed\\n")
"""


def test_worker_process_exit_runs_the_plugins_shutdown(tmp_path):
    """verl has no end-of-run callback: the shared runtime shuts its plugins down at process exit."""
    import os
    import subprocess
    import sys

    (tmp_path / "closer.py").write_text(CLOSER_PLUGIN)
    (tmp_path / "run.yaml").write_text("local_plugins: [closer.py]\n")
    script = (
        "import asyncio\nfrom rlfcore.backends.verl.shared import shared_runtime\n"
        f"asyncio.run(shared_runtime({str(tmp_path / 'run.yaml')!r}))\nprint('built')\n"
    )
    env = {**os.environ, "CLOSED_FILE": str(tmp_path / "closed.txt")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "built"
    assert (tmp_path / "closed.txt").read_text() == "closed\n"


def test_an_agent_program_runs_through_verls_worker(tiny, tmp_path):
    """With ``agent`` in the config, each verl sample is an episode of the agent program on rlf's
    endpoint, its tokens recorded as in the local backend, its reward from the agent's answer."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    import rlfcore.backends.verl.plugin  # noqa: F401
    from rlfcore.backends.verl.launch import prepare

    config = write_run(tmp_path, tiny, extra=f"agent:\n  entry: {AGENT_PROGRAMS}:sdk_agent\n")
    plan = prepare(config, [], ["actor_rollout_ref.rollout.agent.num_workers=1"], tmp_path / "out")
    cfg = plan.config

    async def scenario():
        reward_worker = RewardLoopWorker(cfg)
        worker = AgentLoopWorker(
            cfg, llm_client=None, reward_loop_worker_handles=[_InProcessRewardHandle(reward_worker)]
        )
        worker.llm_client = ScriptedServerClient(worker.tokenizer)
        batch = _batch(plan, worker.tokenizer)
        return worker, await worker.generate_sequences(batch)

    worker, out = asyncio.run(scenario())
    tok = worker.tokenizer
    for i in range(len(out)):
        trace = out.non_tensor_batch["rlf"][i]
        assert trace["stop_reason"] == "answer", trace["error"]
        assert trace["segment_reason"] == "first request" and trace["untrained_segments"] == []
        valid = int(out.batch["attention_mask"][i, cfg.data.max_prompt_length :].sum())
        text = tok.decode(out.batch["responses"][i, :valid].tolist())
        assert "<tool_call>" in text and "<tool_response>\n5\n</tool_response>" in text  # the agent's own add
        row = int(trace["row_id"][1:])
        assert out.non_tensor_batch["score"][i] == (1.0 if row % 2 == 0 else 0.0)
