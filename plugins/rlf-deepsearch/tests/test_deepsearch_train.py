"""``rlf train`` with ``format: search-r1``: a few GRPO steps on the local backend with a tiny model, and
verl's dry run, both on Search-R1's parquet written by ``rlf-deepsearch prepare``."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from rlfcore.cli import cli
from rlf_deepsearch.prepare import INSTRUCTIONS, prepare


@pytest.fixture
def run_config(shared_data, tmp_path):
    """A Search-R1 run: its parquet (4 HotpotQA questions), its tags, stop strings and reward, BM25."""
    from rlfcore.tinymodel import build_tiny

    texts = ["<think>I need to look it up.</think>\n<search>film</search>", "<think>So.</think>\n<answer>yes</answer>"] * 20
    model = build_tiny(texts, tmp_path / "model", vocab_size=300)
    data = tmp_path / "train.parquet"
    assert prepare([shared_data / "qa/hotpotqa/questions.jsonl"], data, limit=4) == 4
    config = {
        "plugins": ["deepsearch"],
        "model": {"path": str(model)},
        "data": {"train": str(data)},
        "engine": {"name": "transformers", "device": "cpu"},
        "rollout": {"max_turns": 2, "n": 2, "max_response_tokens": 256, "max_total_tokens": 1024,
                    "sampling": {"max_tokens": 12, "stop": ["</search>", "</answer>"]}},
        "trainer": {"device": "cpu", "steps": 2, "prompts_per_step": 2},
        "deepsearch": {"corpus": str(shared_data / "qa/hotpotqa/corpus.jsonl"), "index_dir": str(tmp_path / "idx"),
                       "format": "search-r1", "reward": "search-r1", "topk": 2},
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
    result = CliRunner().invoke(cli, ["train", str(path), "--backend", "verl", "--dry-run", "--run-dir", str(tmp_path / "v")])
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
