"""The rlf_agent loop through Ray, as verl's trainer runs it: verl's AgentLoopManager starts agent-loop
worker actors (which find rlf only through the ``verl.plugins`` entry point) and a reward-loop worker
actor that calls the rlf reward function. A local Ray with two CPUs, no GPU."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")

from tests.support import ROOT
from tests.support.verl_backend import LOGPROB, TEXTS, ScriptedServerClient, write_run

# starting Ray and its actors (each imports verl) takes about 30 s; the suite's Ray tests share a test process
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


def test_agent_loop_manager_through_ray(tmp_path):
    import ray
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from rlfcore.backends.verl.launch import prepare
    from rlfcore.tinymodel import build_tiny

    model = build_tiny(TEXTS, tmp_path / "model", vocab_size=300)
    run = tmp_path / "run"
    run.mkdir()
    plan = prepare(write_run(run, model), [], ["actor_rollout_ref.rollout.agent.num_workers=1"], run / "out")
    site = tmp_path / "site" / "rlfcore_verl_probe-0.0.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: rlfcore-verl-probe\nVersion: 0.0.0\n")
    (site / "entry_points.txt").write_text("[verl.plugins]\nrlf = rlfcore.backends.verl.plugin\n")
    path = os.pathsep.join([str(site.parent), str(ROOT)])  # the workers import tests.support's client
    ray.init(
        num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}}
    )
    try:
        cfg = plan.config
        reward_worker = ray.remote(RewardLoopWorker).remote(cfg)

        tok = AutoTokenizer.from_pretrained(str(model))
        dataset = RLHFDataset(str(plan.train_file), tok, cfg.data)
        batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
        batch = batch.repeat(cfg.actor_rollout_ref.rollout.n, interleave=True)
        manager = AgentLoopManager.create(
            cfg, llm_client=ScriptedServerClient(tok), reward_loop_worker_handles=[reward_worker]
        )
        out = manager.generate_sequences(batch)
    finally:
        ray.shutdown()

    n = len(batch)
    mask = out.batch["response_mask"].bool()
    valid = out.batch["attention_mask"][:, cfg.data.max_prompt_length :].bool()
    assert n == 8 and mask.any(dim=1).all() and (valid & ~mask).any(dim=1).all()  # generated and observed tokens
    assert (out.batch["rollout_log_probs"][mask] == LOGPROB).all()
    assert (out.batch["rollout_log_probs"][~mask] == 0).all()
    traces = list(out.non_tensor_batch["rlf"])
    assert all(t["stop_reason"] == "answer" and t["tool_calls"] == 1 for t in traces)
    expected = [1.0 if int(t["row_id"][1:]) % 2 == 0 else 0.0 for t in traces]
    assert out.batch["rm_scores"].sum(dim=1).tolist() == expected
    assert "timing" in out.meta_info
