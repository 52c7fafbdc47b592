"""The plugin as rlf sees it: the conformance check, settings, examples in both formats, and ``rlf eval``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rlf_deepsearch import plugin
from rlf_deepsearch.settings import Settings

from rlfcore import ConfigError, SetupContext
from rlfcore.testing import check_plugin, make_runtime, rollout

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hotpotqa.yaml"


def test_plugin_conforms(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the demo corpus's index goes here
    report = check_plugin("deepsearch")
    assert report.ok, report.render()
    assert "smoke rollout red-planet: 2 turns, 1 tool calls, reward 1" in report.render()


@pytest.mark.parametrize("fmt, weight", [("hermes", 0.0), ("search-r1", 0.3)])
def test_examples_earn_their_expected_rewards(tmp_path, fmt, weight):
    settings = {"format": fmt, "format_reward": weight, "index_dir": str(tmp_path)}
    examples = plugin.register_examples(SetupContext(plugin="deepsearch", settings=Settings(**settings)))
    rows = [ex.row for ex in examples]
    config = {
        "plugins": ["deepsearch"],
        "deepsearch": settings,
        "rollout": {"sampling": {"stop": ["</search>", "</answer>"]}},
    }
    trajectories = rollout(config, rows, {ex.row["id"]: ex.script for ex in examples})
    assert [t.reward for t in trajectories] == [ex.expected_reward for ex in examples] == [1.0, weight]
    assert "Mars" in json.dumps(trajectories[0].messages[1:])


def test_relative_paths_are_read_from_the_config_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "c.jsonl").write_text(
        json.dumps({"id": "x", "title": "Zanzibar", "text": "An island."}) + "\n"
    )
    (tmp_path / "run.yaml").write_text(
        "plugins: [deepsearch]\ndeepsearch:\n  corpus: data/c.jsonl\n  index_dir: idx\n  topk: 1\n"
    )
    runtime = make_runtime(tmp_path / "run.yaml")
    assert len(list((tmp_path / "idx").iterdir())) == 1  # built when the run started
    search = runtime.tools_for("deepsearch")["search"]
    assert search.fn(query="zanzibar island") == 'Doc 1(Title: "Zanzibar") An island.'


def test_settings_mistakes_are_named():
    with pytest.raises(ConfigError) as err:
        make_runtime({"plugins": ["deepsearch"], "deepsearch": {"topK": 3, "format": "react"}})
    text = str(err.value)
    assert "deepsearch.topK: unknown key" in text and "did you mean 'topk'" in text
    assert "deepsearch.format" in text and "hermes" in text


def test_missing_corpus_fails_the_run_start(tmp_path):
    with pytest.raises(Exception, match="no such corpus file"):
        make_runtime({"plugins": ["deepsearch"], "deepsearch": {"corpus": str(tmp_path / "nope.jsonl")}})


def test_importing_the_plugin_is_cheap():
    code = "import sys, rlf_deepsearch.plugin; print([m for m in ('bm25s', 'numpy', 'httpx', 'torch') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_rlf_eval_and_train_run_the_example_config(shared_data, tmp_path, monkeypatch):
    """``rlf eval`` and ``rlf train`` on the example config with a tiny local model: the runs work end to
    end (a random model earns no reward; the figures are not the point). In-process: torch loads once."""
    from click.testing import CliRunner
    from rlf_deepsearch.prepare import prepare

    from rlfcore.cli import cli
    from rlfcore.testing import build_tiny

    texts = ['<tool_call>{"name": "search", "arguments": {"query": "film"}}</tool_call>', "<answer>yes</answer>"] * 20
    model = build_tiny(texts, tmp_path / "model", vocab_size=300)
    rows = tmp_path / "rows.jsonl"
    assert prepare([shared_data / "qa/hotpotqa/questions.jsonl"], rows, limit=3) == 3
    out = tmp_path / "out.jsonl"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            str(EXAMPLE),
            f"model.path={model}",
            f"data.eval={rows}",
            f"deepsearch.corpus={shared_data / 'qa/hotpotqa/corpus.jsonl'}",
            f"deepsearch.index_dir={tmp_path / 'idx'}",
            "engine.device=cpu",
            "rollout.max_turns=2",
            "rollout.sampling.max_tokens=24",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3 and {x["env"] for x in lines} == {"deepsearch"}
    assert all(x["stop_reason"] != "error" and x["reward_error"] is None for x in lines)
    assert {x["row_id"] for x in lines} == {json.loads(r)["id"] for r in rows.read_text().splitlines()}
    assert "reward" in result.output

    # and `rlf train` (GRPO, one step) on the same config and model
    result = CliRunner().invoke(
        cli,
        [
            "train",
            str(EXAMPLE),
            f"model.path={model}",
            f"data.train={rows}",
            f"deepsearch.corpus={shared_data / 'qa/hotpotqa/corpus.jsonl'}",
            f"deepsearch.index_dir={tmp_path / 'idx'}",
            "engine.device=cpu",
            "trainer.device=cpu",
            "trainer.steps=1",
            "trainer.prompts_per_step=2",
            "rollout.n=2",
            "rollout.max_turns=2",
            "rollout.sampling.max_tokens=8",
            "--run-dir",
            str(tmp_path / "train"),
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    [metrics] = [json.loads(x) for x in (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 1 and "reward/exact_match" in metrics and metrics["reward_errors"] == 0
