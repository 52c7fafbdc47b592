"""``rlf train`` with ``format: search-r1``: a few GRPO steps on the local backend with a tiny model, and
verl's dry run, both on Search-R1's parquet written by ``rlf-deepsearch prepare``."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from rlf_deepsearch.prepare import INSTRUCTIONS, prepare

from rlfcore.cli import cli


@pytest.fixture
def run_config(shared_data, tmp_path):
    """A Search-R1 run: its parquet (4 HotpotQA questions), its tags, stop strings and reward, BM25."""
    from rlfcore.testing import build_tiny

    texts = [
        "<think>I need to look it up.</think>\n<search>film</search>",
        "<think>So.</think>\n<answer>yes</answer>",
    ] * 20
    model = build_tiny(texts, tmp_path / "model", vocab_size=300)
    data = tmp_path / "train.parquet"
    assert prepare([shared_data / "qa/hotpotqa/questions.jsonl"], data, limit=4) == 4
    config = {
        "plugins": ["deepsearch"],
        "model": {"path": str(model)},
        "data": {"train": str(data)},
        "engine": {"name": "transformers", "device": "cpu"},
        "rollout": {
            "max_turns": 2,
            "n": 2,
            "max_response_tokens": 256,
            "max_total_tokens": 1024,
            "sampling": {"max_tokens": 12, "stop": ["</search>", "</answer>"]},
        },
        "trainer": {"device": "cpu", "steps": 2, "prompts_per_step": 2},
        "deepsearch": {
            "corpus": str(shared_data / "qa/hotpotqa/corpus.jsonl"),
            "index_dir": str(tmp_path / "idx"),
            "format": "search-r1",
            "reward": "search-r1",
            "topk": 2,
        },
    }
    path = tmp_path / "search_r1.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, data


@pytest.mark.slow
def test_local_train_runs_search_r1_steps(run_config, tmp_path):
    path, _ = run_config
    result = CliRunner().invoke(cli, ["train", str(path), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output + repr(result.exception)
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["reward_errors"] == 0 for m in metrics)


def test_verl_dry_run_of_search_r1(run_config, tmp_path):
    path, data = run_config
    # trainer.device=cpu (set for the local run) is refused by the verl backend, which places the model on its GPUs.
    args = [
        "train",
        str(path),
        "trainer.device=auto",
        "--backend",
        "verl",
        "--dry-run",
        "--run-dir",
        str(tmp_path / "v"),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "nothing launched" in result.output and "default_agent_loop: rlf_agent" in result.output
    records = pq.read_table(tmp_path / "v" / "verl" / "train.parquet").to_pylist()
    source = pq.read_table(data).to_pylist()
    assert len(records) == 4 and {r["data_source"] for r in records} == {"deepsearch"}
    for record, original in zip(records, source):
        assert record["prompt"] == original["prompt"]  # Search-R1's instructions reach verl unchanged
        assert record["prompt"][0]["content"] == INSTRUCTIONS["search-r1"].format(question=original["question"])
        row = json.loads(record["extra_info"]["rlf_row"])
        assert row["reward_model"]["ground_truth"] == {"target": original["golden_answers"]}


@pytest.mark.slow
def test_local_trainer_learns_from_search_r1_trajectories(run_config, tmp_path):
    """Two GRPO steps where every trajectory searches, reads the <information> block and answers.

    A random tiny model never writes Search-R1's tags, so its turns are scripted (ScriptedEngine,
    a stand-in for sampling only): everything else is real, the plugin's parsing, BM25 search,
    raw in-turn observations, Search-R1's reward, the loss and the update of the tiny model."""
    import yaml as _yaml

    # The local trainer samples with its own engine and offers no seam for a scripted one, and
    # rlfcore.testing sits below the backends, so this test reaches into them (the only plugin test that does).
    from rlfcore.backends.local.local import LocalTrainer  # noqa: TID251
    from rlfcore.backends.local.model import load_policy  # noqa: TID251
    from rlfcore.backends.local.rundir import RunDir  # noqa: TID251
    from rlfcore.testing import ScriptedEngine, make_runtime, read_rows

    path, data = run_config
    config = _yaml.safe_load(path.read_text())
    config["trainer"].update({"steps": 2, "prompts_per_step": 2, "lr": 0.01})
    config["rollout"].update({"max_response_tokens": 3072, "max_total_tokens": 4096})  # room for the passages
    config["rollout"]["sampling"]["max_tokens"] = 200
    rows = read_rows(data)
    golds = {row.id: row.ground_truth["target"][0] for row in rows}

    def policy(request_id: str, prompt: str) -> str:
        """Even samples of a group answer right, odd ones wrong; each searches first."""
        row_id, k = request_id.rsplit("#", 1)
        if "\n\n<information>" not in prompt:  # the instructions name the tag too, after a space
            return "<think>I should look this up.</think>\n<search>Kiss and Tell 1945 film</search>"
        answer = golds[row_id] if int(k) % 2 == 0 else "no idea"
        return f"<think>The passages say so.</think>\n<answer>{answer}</answer>"

    runtime = make_runtime(config)
    model, hf_tok = load_policy(config["model"]["path"], "cpu")
    run_dir = RunDir(tmp_path / "run")
    trainer = LocalTrainer(runtime, model, hf_tok, rows, run_dir)
    trainer.rollout.engine = ScriptedEngine(trainer.tok, policy)
    collected, _, _ = asyncio.run(trainer.collect(rows[:1]))
    assert collected  # a real rollout of the first question, searched then answered
    history = trainer.run()
    run_dir.close()
    assert [m["step"] for m in history] == [1, 2]
    for m in history:
        assert m["tool_use"] == 1.0 and m["reward_errors"] == 0
        assert 0 < m["reward_mean"] < 1 and m["reward_std"] > 0  # right and wrong answers in each group
        assert m["grad_norm"] > 0
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples" / "step_000001.jsonl").read_text().splitlines()]
    assert any(s["reward"] == 1.0 for s in samples) and any(s["reward"] < 1.0 for s in samples)
    assert all("<information>Doc 1(Title:" in json.dumps(s["messages"]) for s in samples)  # the passages were read
