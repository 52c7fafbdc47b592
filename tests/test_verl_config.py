"""The rlf config as verl's config: translated, composed and validated by verl's own code; the data
in verl's parquet layout; the dry run of ``rlf train --backend verl``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")


def _run(tmp: Path, extra: str = "", rows: list[dict] | None = None) -> Path:
    rows = rows or [
        {"id": "a", "prompt": "What is 1 plus 1?", "ground_truth": "2"},
        {"id": "b", "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name 2."}],
         "ground_truth": ["two", "2"], "extra": {"level": 3}},
    ]
    (tmp / "adder.py").write_text("")
    (tmp / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp / "run.yaml").write_text(
        "local_plugins: [adder.py]\nseed: 7\nmodel: {path: Qwen/Qwen3-4B}\ndata: {train: data.jsonl, eval: data.jsonl}\n"
        "rollout: {n: 8, max_turns: 5, max_total_tokens: 6144, max_response_tokens: 4096,\n"
        "          sampling: {temperature: 0.9, top_p: 0.95}}\n"
        "trainer: {steps: 20, prompts_per_step: 16, micro_batch_size: 4, lr: 1.0e-6, kl_coef: 0.001,\n"
        "          clip_ratio: 0.2, clip_ratio_high: 0.28, lr_schedule: cosine}\n" + extra
    )
    return tmp / "run.yaml"


def test_translation_passes_verls_validation(tmp_path):
    from rlfcore.backends.verl.hydra import Cluster
    from rlfcore.backends.verl.launch import prepare

    cluster = Cluster(gpus_per_node=8, nodes=2, rollout="sglang", ray_address="10.0.0.1:6379", tensor_parallel=2)
    plan = prepare(_run(tmp_path), ["rollout.max_turns=6"], [], tmp_path / "out", cluster)
    c = plan.config
    actor, rollout = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert c.algorithm.adv_estimator == "grpo"
    assert (rollout.n, rollout.multi_turn.max_assistant_turns, rollout.multi_turn.enable) == (8, 6, True)
    assert (rollout.prompt_length, rollout.response_length) == (2048, 4096)
    assert (rollout.temperature, rollout.top_p, rollout.calculate_log_probs) == (0.9, 0.95, True)
    assert rollout.agent.default_agent_loop == "rlf_agent"
    assert (rollout.name, rollout.tensor_model_parallel_size) == ("sglang", 2)
    assert (c.data.train_batch_size, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu) == (16, 16, 4)
    assert (actor.optim.lr, actor.optim.lr_scheduler_type, actor.clip_ratio_low, actor.clip_ratio_high) == (1e-6, "cosine", 0.2, 0.28)
    assert actor.use_kl_loss is True and actor.kl_loss_coef == 0.001
    assert (c.trainer.total_training_steps, c.trainer.n_gpus_per_node, c.trainer.nnodes) == (20, 8, 2)
    assert c.ray_kwargs.ray_init.address == "10.0.0.1:6379"
    assert c.actor_rollout_ref.model.path == "Qwen/Qwen3-4B" and c.data.seed == 7
    # the rlf config and its overrides reach the agent loop and the reward function
    assert c.rlf.config == str((tmp_path / "run.yaml").resolve()) and list(c.rlf.overrides) == ["rollout.max_turns=6"]
    reward = c.reward.custom_reward_function
    assert reward.name == "compute_score" and reward.path.endswith("rlfcore/backends/verl/reward.py")
    assert reward.reward_kwargs.rlf_config == c.rlf.config
    assert (tmp_path / "out" / "verl" / "config.yaml").read_text() == plan.yaml()
    assert (tmp_path / "out" / "verl" / "overrides.txt").read_text().splitlines() == plan.overrides


def test_raw_overrides_win_and_odd_strings_survive(tmp_path):
    from rlfcore.backends.verl.launch import prepare

    odd = "rollout.system_prompt=It's a=b \\ path, \\'q\\"
    plan = prepare(_run(tmp_path), [odd], ["actor_rollout_ref.actor.optim.lr=3e-6", "trainer.logger=[console,wandb]"], tmp_path / "o")
    assert plan.config.actor_rollout_ref.actor.optim.lr == 3e-6
    assert list(plan.config.trainer.logger) == ["console", "wandb"]
    assert list(plan.config.rlf.overrides) == [odd]


@pytest.mark.parametrize(
    "raw, message",
    [
        (["actor_rollout_ref.no_such_key=1"], "no_such_key"),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"], "ppo_micro_batch_size"),
    ],
)
def test_verl_rejections_name_the_setting(tmp_path, raw, message):
    from rlfcore.backends.verl.hydra import TranslationError
    from rlfcore.backends.verl.launch import prepare

    with pytest.raises(TranslationError, match=message):
        prepare(_run(tmp_path), [], raw, tmp_path / "o")


@pytest.mark.parametrize(
    "override, message",
    [("trainer.lr_schedule=linear", "lr_schedule"), ("rollout.max_total_tokens=4096", "max_total_tokens")],
)
def test_untranslatable_settings_are_errors(tmp_path, override, message):
    from rlfcore.backends.verl.hydra import TranslationError
    from rlfcore.backends.verl.launch import prepare

    with pytest.raises(TranslationError, match=message):
        prepare(_run(tmp_path), [override], [], tmp_path / "o")


def test_parquet_layout_and_round_trip(tmp_path):
    import pyarrow.parquet as pq

    from rlfcore.backends.verl.convert import row_from_verl
    from rlfcore.backends.verl.launch import prepare
    from rlfcore.data import read_rows

    plan = prepare(_run(tmp_path), [], [], tmp_path / "o")
    records = pq.read_table(plan.train_file).to_pylist()
    assert [r["agent_name"] for r in records] == ["rlf_agent"] * 2
    assert [r["data_source"] for r in records] == ["adder"] * 2
    assert [r["extra_info"]["index"] for r in records] == [0, 1]
    assert records[0]["reward_model"]["ground_truth"] == "2"
    assert json.loads(records[1]["reward_model"]["ground_truth"]) == ["two", "2"]
    assert records[1]["prompt"][0] == {"role": "system", "content": "Be brief."}
    for original, record in zip(read_rows(tmp_path / "data.jsonl"), records):
        row = row_from_verl({"raw_prompt": record["prompt"], **record})
        assert (row.id, row.prompt, row.ground_truth, row.extra) == (original.id, original.prompt, original.ground_truth, original.extra)


def test_dry_run_prints_the_config_and_launches_nothing(tmp_path, monkeypatch):
    from rlfcore.backends.verl import launch

    monkeypatch.setattr(launch, "launch", lambda plan: pytest.fail("a dry run must not launch"))
    lines: list[str] = []
    assert launch.main(_run(tmp_path), [], [], tmp_path / "o", dry_run=True, echo=lines.append) == 0
    out = "\n".join(lines)
    assert "adv_estimator: grpo" in out and "default_agent_loop: rlf_agent" in out
    assert "nothing launched" in out and "verl.trainer.main_ppo" in out
    assert (tmp_path / "o" / "verl" / "train.parquet").is_file()


@pytest.mark.parametrize("gpus, nodes", [(8, 1), (4, 2)])
def test_the_documented_search_r1_recipe_validates(tmp_path, gpus, nodes):
    """docs/verl.md's recipe, with its plugin section dropped (the numbers are what verl checks)."""
    import re

    import yaml

    from rlfcore.backends.verl.hydra import Cluster
    from rlfcore.backends.verl.launch import prepare

    doc = (Path(__file__).resolve().parents[1] / "docs" / "verl.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "search-r1.yaml" in b]
    recipe = yaml.safe_load(block)
    recipe.pop("deepsearch"), recipe.pop("plugins")
    recipe["data"] = {"train": "data.jsonl"}
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "a", "prompt": "Who?", "ground_truth": "x"}) + "\n")
    (tmp_path / "search-r1.yaml").write_text(yaml.safe_dump(recipe))
    cluster = Cluster(gpus_per_node=gpus, nodes=nodes, tensor_parallel=2, ray_address="10.0.0.1:6379" if nodes > 1 else None)
    plan = prepare(tmp_path / "search-r1.yaml", [], ["trainer.logger=[console,wandb]"], tmp_path / "o", cluster)
    assert plan.config.trainer.n_gpus_per_node * plan.config.trainer.nnodes == 8
    assert plan.config.actor_rollout_ref.rollout.n == 5
