"""The plugin as rlf sees it: conformance, settings, the run's judge, warnings, cheap import, benchmark."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from rlf_judge_qwq.judge import JUDGE, judge_for
from rlf_judge_qwq.settings import JudgeSettings

from rlfcore import ConfigError, Stash
from rlfcore.testing import (
    ByteChatTokenizer,
    OpenAIServer,
    RewardPipeline,
    Rollout,
    ScriptedEngine,
    check_plugin,
    load_config,
    make_manager,
    make_runtime,
    normalize_row,
    rollout,
)

PLUGIN_DIR = Path(__file__).resolve().parents[1]
SEVEN = "<think>\nFine.\n</think>\n\nVERDICT: 7"


def test_plugin_check_passes():
    report = check_plugin("judge-qwq")
    assert report.ok, report.render()
    names = [i.name for i in report.items]
    assert "smoke rollout judge-qwq-correct" in names and "smoke rollout judge-qwq-injected" in names


def test_without_endpoints_the_judge_stays_out():
    assert judge_for(None, Stash()) is None
    config, _ = load_config({"plugins": ["judge-qwq"]}, manager=make_manager())
    assert judge_for(config, Stash()) is None and isinstance(config.settings("judge-qwq"), JudgeSettings)
    [traj] = rollout({"plugins": ["judge-qwq"]}, [{"id": "q", "prompt": "?", "ground_truth": "42"}], {"q": ["42"]})
    assert traj.reward == 1.0 and traj.reward_error is None and "judge.judge-qwq" not in traj.reward_components


def test_the_run_keeps_one_judge_and_warns_about_a_short_reward_timeout(caplog):
    with OpenAIServer(SEVEN) as server:
        raw = {"plugins": ["judge-qwq"], "judge-qwq": {"endpoints": [server.base_url], "timeout_s": 120}}
        config, _ = load_config(raw, manager=make_manager())
        stash = Stash()
        assert judge_for(config, stash) is judge_for(config, stash)
        with caplog.at_level(logging.WARNING, logger="rlf_judge_qwq.plugin"):
            rollout(raw, [{"id": "q", "prompt": "?"}], {"q": ["42"]})
    assert "reward.timeout_s (60 s) is below judge-qwq.timeout_s (120 s)" in caplog.text


def test_the_judge_lives_in_the_runs_stash_and_shutdown_closes_its_connections():
    """A real loopback chat server answers as the judge; after the run its client's pools are closed."""
    with OpenAIServer(SEVEN) as server:
        runtime = make_runtime({"plugins": ["judge-qwq"], "judge-qwq": {"endpoints": [server.base_url]}})
        tok = ByteChatTokenizer()

        async def main():
            out = await Rollout(runtime, ScriptedEngine(tok, {"q": ["42"]}), tok).run(
                [normalize_row({"id": "q", "prompt": "?"})], n=2
            )
            await RewardPipeline(runtime).score(out)
            judge = runtime.stash("judge-qwq")[JUDGE]
            pools = [c.http for shards in judge.backend._state.clients.values() for c in shards]
            await runtime.aclose()
            return out, judge, pools

        out, judge, pools = asyncio.run(main())
    assert judge.metrics.snapshot()["requests"] >= 1 and all("judge.judge-qwq" in t.reward_components for t in out)
    assert pools and all(http.is_closed for http in pools) and judge.backend._state is None
    assert runtime._stashes == {}


def test_config_mistakes_are_reported_with_their_path():
    with pytest.raises(ConfigError) as err:
        section = {"endpoint": ["http://x/v1"], "mode": "pairwise"}
        load_config({"plugins": ["judge-qwq"], "judge-qwq": section}, manager=make_manager())
    text = str(err.value)
    assert "judge-qwq.endpoint" in text and "did you mean 'endpoints'" in text and "judge-qwq.mode" in text


def test_importing_the_plugin_is_cheap():
    heavy = "('httpx', 'torch', 'transformers')"
    code = f"import sys, rlf_judge_qwq.plugin; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_benchmark_runs_at_tiny_size(tmp_path):
    out = tmp_path / "bench.json"
    script = PLUGIN_DIR / "benchmarks" / "judge_throughput.py"
    cmd = [sys.executable, str(script), "--delay-s", "0.01", "--concurrency", "1,4", "--rounds", "2", "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert [lvl["concurrency"] for lvl in data["levels"]] == [1, 4]
    assert all(lvl["failed"] == 0 and lvl["requests_per_s"] > 0 for lvl in data["levels"])
    assert "req/s" in result.stdout
