"""rlf's per-sample records under the verl backend, and per-turn rewards reaching verl's score.

verl's rollout dumps keep the decoded text and the score only; the rlf reward function, called by
verl's real reward-loop worker and reward manager, writes each scored sample's trace (messages, tool
calls, stop reason, reward components, turn rewards) to the run's samples folder. The batch comes
from verl's dataset class over the converted parquet and runs through verl's real agent-loop worker
and ``LLMServerClient``; only the vLLM server is scripted (``tests.support.verl_backend.ScriptedVllmServer``),
since no model server runs in the unit tests.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")

from tests.support.verl_backend import TEXTS, InProcessLoadBalancer, ScriptedVllmServer, write_run

TURNS_PLUGIN = '''
from rlfcore import hookimpl


@hookimpl
def compute_score(sample, verification, ctx):
    """A quarter for the tool turn, a half for answering: per-turn rewards."""
    return [0.25, 0.5] if sample.num_turns == 2 else None
'''


class _Remote:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


class _RewardHandle:
    """A reward-loop worker called in process, as the agent-loop worker calls the Ray actor."""

    def __init__(self, worker):
        self.compute_score = _Remote(worker.compute_score)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    return build_tiny(TEXTS, tmp_path_factory.mktemp("tiny") / "model", vocab_size=300)


def _generate(plan, version: int = 0):
    """One step's batch through verl's agent-loop worker, its reward worker and its server client."""
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.workers.rollout.llm_server import LLMServerClient

    import rlfcore.backends.verl.plugin  # noqa: F401  (what verl's entry point imports)

    cfg = plan.config

    async def scenario():  # verl's workers keep the event loop they were built in
        worker = AgentLoopWorker(
            cfg, llm_client=None, reward_loop_worker_handles=[_RewardHandle(RewardLoopWorker(cfg))]
        )
        server = ScriptedVllmServer(worker.tokenizer, versions=(version, version))
        worker.llm_client = LLMServerClient(cfg, load_balancer_handle=InProcessLoadBalancer(server))
        dataset = RLHFDataset(str(plan.train_file), worker.tokenizer, cfg.data)
        batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
        return await worker.generate_sequences(batch.repeat(cfg.actor_rollout_ref.rollout.n, interleave=True))

    return asyncio.run(scenario())


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_scored_sample_leaves_rlfs_record(tiny, tmp_path):
    from rlfcore.backends.verl.launch import prepare

    plan = prepare(write_run(tmp_path, tiny), [], ["actor_rollout_ref.rollout.agent.num_workers=1"], tmp_path / "out")
    out = _generate(plan, version=2)  # weights of step 2: this is step 3's rollout
    samples = tmp_path / "out" / "samples"
    assert sorted(p.name for p in samples.iterdir()) == ["step_000003.jsonl"]
    records = _records(samples / "step_000003.jsonl")
    assert len(records) == 8
    by_id = {r["id"]: r for r in records}
    for trace, score in zip(out.non_tensor_batch["rlf"], out.non_tensor_batch["score"]):
        rec = by_id[trace["id"]]
        assert rec["reward"] == score  # what verl trains on
        assert rec["reward_components"]["score"] == score and rec["reward_error"] is None
        assert [m["role"] for m in rec["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert rec["messages"][1]["tool_calls"][0]["function"]["name"] == "add"
        assert rec["tool_calls"] == 1 and rec["tool_errors"] == 0 and rec["stop_reason"] == "answer"
        assert rec["weight_version"] == 2 and rec["turn_rewards"] is None
        assert (
            rec["prompt_tokens"] > 0 and 0 < rec["generated_tokens"] < rec["response_tokens"]
        )  # the tool output is not generated
    assert sorted(r["reward"] for r in records) == [0.0] * 4 + [1.0] * 4


def test_turn_rewards_reach_verl_as_the_samples_total(tiny, tmp_path):
    """verl's GRPO gives a sample one advantage; per-turn rewards count in its total, as with
    ``trainer.turn_advantage: outcome`` locally (``return_to_go`` is refused for verl, see
    test_verl_config.py), and the record keeps the turns."""
    from rlfcore.backends.verl.launch import prepare

    config = write_run(tmp_path, tiny)
    (tmp_path / "turns.py").write_text(TURNS_PLUGIN)
    text = config.read_text().replace(
        "local_plugins: [adder.py]", "local_plugins: [turns.py, adder.py]\nenvs: {calc: [turns, adder]}"
    )
    config.write_text(text.replace("  train: data.jsonl\n", "  train: data.jsonl\n  default_env: calc\n"))
    plan = prepare(config, [], ["actor_rollout_ref.rollout.agent.num_workers=1"], tmp_path / "out")
    out = _generate(plan)
    valid = out.batch["attention_mask"][:, plan.config.data.max_prompt_length :].sum(dim=1)
    assert out.batch["rm_scores"].sum(dim=1).tolist() == [0.75] * 8
    assert [out.batch["rm_scores"][i, int(v) - 1].item() for i, v in enumerate(valid)] == [
        0.75
    ] * 8  # on the last token
    records = _records(tmp_path / "out" / "samples" / "step_000001.jsonl")
    assert [r["turn_rewards"] for r in records] == [[0.25, 0.5]] * 8
    assert all(r["reward"] == 0.75 and r["reward_components"]["score"] == 0.75 for r in records)


def test_a_record_that_cannot_be_written_costs_no_reward(tiny, tmp_path, caplog):
    from rlfcore.backends.verl.bridge import trace_of
    from rlfcore.backends.verl.reward import compute_score
    from rlfcore.loop import Trajectory

    config = write_run(tmp_path, tiny)
    blocked = tmp_path / "samples"
    blocked.write_text("a file where the samples folder should be")
    traj = Trajectory(
        id="q0#a",
        row_id="q0",
        env=None,
        ground_truth="1",
        messages=[{"role": "user", "content": "What is 0 plus 1?"}, {"role": "assistant", "content": "1"}],
        num_turns=1,
        stop_reason="answer",
    )
    extra = {"rlf": trace_of(traj), "max_global_steps": 0}
    with caplog.at_level("WARNING", logger="rlfcore.verl"):
        result = asyncio.run(
            compute_score("adder", "1", "1", extra, rlf_config=str(config), rlf_samples_dir=str(blocked))
        )
    assert result == {"score": 1.0, "rlf_error": 0.0}
    assert "cannot write the record of sample q0#a" in caplog.text and str(blocked) in caplog.text


@pytest.mark.parametrize("resume, kept", [(False, []), (True, ["step_000001.jsonl", "step_000002.jsonl"])])
def test_a_run_starts_the_records_of_the_steps_it_runs_afresh(tmp_path, resume, kept):
    """Records are appended, so a fresh run, or a resumed one past its checkpoint, must not add to
    an earlier attempt's: with verl's latest checkpoint at step 2, steps 3 on are run again."""
    from rlfcore.backends.verl.launch import clear_records

    samples = tmp_path / "samples"
    samples.mkdir()
    for name in ("step_000001.jsonl", "step_000002.jsonl", "step_000003.jsonl", "step_unknown.jsonl", "3.jsonl"):
        (samples / name).write_text("{}\n")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2\n")
    clear_records(tmp_path, resume)
    assert sorted(p.name for p in samples.iterdir()) == ["3.jsonl", *kept]  # verl's own dump is verl's
