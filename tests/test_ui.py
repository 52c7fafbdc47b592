"""``rlf ui``: every route, through Starlette's TestClient, over run folders these tests make.

The run folders hold real trajectories: the real loop, executor and reward pipeline, with a real BPE
tokenizer (built here from text, as ``rlf init-model`` does) and its chat template. Only the policy is
a stand-in, :class:`ScriptedEngine` playing fixed texts (no model can be trained in a unit test), with
made-up logprobs so the heat map has something to show. Files are written line by line in the format
``RunDir`` writes (``Trajectory.record()``), without importing torch.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import statistics
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("tokenizers")

from rlfcore.chat import HFChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.base import Generation, SamplingParams
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.rewards import RewardPipeline
from rlfcore.testing import make_runtime

TOKEN = "ui-test-token-0123456789"  # the secret every request needs; a real start makes a fresh one
BASE = "http://127.0.0.1:8765"  # a Host the UI accepts (loopback)

PLUGIN = '''
"""Test tools for the UI: an adder, a tool that outlives its timeout, and a scorer that fails on one row."""
import asyncio
from rlfcore.hookspecs import hookimpl
from rlfcore.types import Tool


async def _slow(seconds: float = 5.0) -> str:
    await asyncio.sleep(seconds)
    return "done"


def _add(a: int, b: int) -> str:
    return str(a + b)


@hookimpl
def register_tools(ctx):
    return [
        Tool("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "required": ["a", "b"]}, _add),
        Tool("slow", "Wait, then answer (times out).", {"type": "object", "properties": {"seconds": {"type": "number"}}}, _slow,
             timeout_s=0.2),
    ]


@hookimpl
def compute_score(sample, verification, ctx):
    if sample.ground_truth == "boom":
        raise RuntimeError("scorer failed on purpose")
    return 1.0 if sample.response.strip() == str(sample.ground_truth) else 0.0
'''

CALL_ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
CALL_SLOW = '<tool_call>\n{"name": "slow", "arguments": {"seconds": 5}}\n</tool_call>'

ROWS = {
    "good": [
        {"id": "q1", "prompt": "What is 2+3?", "ground_truth": "5"},
        {"id": "q2", "prompt": "What is 4+4?", "ground_truth": "8"},
    ],
    "mismatch": [{"id": "ws", "prompt": "What is 2+3, with spaces?", "ground_truth": "5"}],
    "timeouts": [{"id": "slow", "prompt": "Wait for it.", "ground_truth": "done"}],
    "badreward": [{"id": "boom", "prompt": "Score me.", "ground_truth": "boom"}],
    "sure": [{"id": "sure", "prompt": "What is 2+3, surely?", "ground_truth": "5"}],
}
DEAD_PID = 4_194_305  # above Linux's largest pid_max: no process has it


def policy(request_id: str, prompt: str) -> str:
    """Even samples call the tool and answer right, odd ones guess: groups with reward variance."""
    row, k = request_id.split("#")
    called = "<tool_response>" in prompt
    if row == "ws":
        return "  5  " if called else CALL_ADD  # content is stripped: the rollout departs from a rendering
    if row == "slow":
        return "done" if called else CALL_SLOW
    if row == "boom":
        return "whatever"
    if row == "sure":  # a row the policy has learnt: every sample right
        return "5" if called else CALL_ADD
    if int(k) % 2:
        return "7"
    return ("5" if row == "q1" else "8") if called else CALL_ADD


class LogprobEngine(ScriptedEngine):
    """The scripted policy, with varied logprobs standing in for a model's (the heat map needs some)."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        gen = await super().generate(prompt_ids, params, request_id)
        return Generation(gen.token_ids, [-(i % 7) * 0.8 for i in range(len(gen.token_ids))], gen.finish_reason)


def build_tokenizer(folder: Path) -> HFChatTokenizer:
    from rlfcore.tinymodel import build_tokenizer as build

    texts = ["What is 2+3? What is 4+4? Wait for it. Score me. done whatever answer tool call add slow"] * 20
    return HFChatTokenizer(build(texts, folder, vocab_size=300))


def write_config(folder: Path, plugin: Path) -> Path:
    cfg = folder / "run.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        local_plugins: [{plugin}]
        model: {{path: {folder / "model"}}}
        data: {{train: {folder / "rows.jsonl"}}}
        rollout: {{n: 4, max_turns: 3}}
        trainer: {{steps: 3}}
        """)
    )
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for rows in ROWS.values() for r in rows))
    return cfg


def roll(config: Path, tok: HFChatTokenizer, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Real rollouts of ``rows`` (4 samples each), scored: their JSON records."""
    runtime = make_runtime(config)

    async def go() -> list[Any]:
        loop = Rollout(runtime, LogprobEngine(tok, policy), tok)
        async with runtime:
            trajs = await loop.run([normalize_row(dict(r), i) for i, r in enumerate(rows)])
            await RewardPipeline(runtime).score(trajs)
        return trajs

    return [t.record() for t in asyncio.run(go())]


def metrics_line(step: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The step metrics LocalTrainer logs, computed from the records the same way."""
    n, calls = len(records), sum(r["tool_calls"] for r in records)
    rewards = [r["reward"] for r in records]
    out = {
        "step": step,
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards),
        "tool_calls_per_trajectory": calls / n,
        "tool_use": sum(1 for r in records if r["tool_calls"]) / n,
        "tool_error_rate": sum(r["tool_errors"] for r in records) / calls if calls else 0.0,
        "response_length": statistics.fmean(r["generated_tokens"] for r in records),
        "reward_errors": sum(1 for r in records if r["reward_error"]),
        "kl": 0.01 * step,
        "loss": 0.1 / step,
        "rollout_s": 0.5,
        "score_s": 0.01,
        "train_s": 0.2,
        "step_s": 0.71,
    }
    comps: dict[str, list[float]] = {}
    for r in records:
        for k, v in r["reward_components"].items():
            comps.setdefault(k, []).append(v)
    out.update({f"reward/{k}": statistics.fmean(v) for k, v in comps.items()})
    out.update({f"stop/{k}": v for k, v in Counter(r["stop_reason"] for r in records).items()})
    return out


def write_run(
    folder: Path,
    steps: list[list[dict[str, Any]]],
    tokenizer_dir: Path,
    finished: bool = True,
    checkpoint: bool = True,
) -> Path:
    """A run folder as ``rlf train`` leaves it: config, metrics and samples per step, a checkpoint, a summary."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("plugins: []\ntrainer:\n  steps: 3\nrollout:\n  n: 4\n")
    if checkpoint:
        model = folder / "checkpoints" / "step_000001" / "model"
        model.mkdir(parents=True)
        for f in tokenizer_dir.iterdir():
            (model / f.name).write_bytes(f.read_bytes())
        (model.parent / "trainer.pt").write_bytes(b"state")
    (folder / "samples").mkdir()
    for step, records in enumerate(steps, 1):
        append_step(folder, step, records)
    if finished:
        (folder / "summary.json").write_text(json.dumps({"steps": len(steps), "total_s": 42.0}))
    return folder


def append_step(folder: Path, step: int, records: list[dict[str, Any]]) -> None:
    with (folder / "samples" / f"step_{step:06d}.jsonl").open("w") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with (folder / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(metrics_line(step, records)) + "\n")


def write_launch(folder: Path, kind: str, config: Path, rc: int | None, pid: int = DEAD_PID, **more: Any) -> None:
    """``ui_launch.json`` as the launch page writes it (``rc`` None: the process has not ended, or its
    end was never recorded because the UI that launched it stopped first)."""
    out = ["--out", str(folder / "eval.jsonl")] if kind == "eval" else ["--run-dir", str(folder)]
    record = {
        "kind": kind,
        "config": str(config),
        "overrides": [],
        "resume": False,
        "command": ["python", "-m", "rlfcore", kind, str(config), *out],
        "pid": pid,
        "started": 1000.0,
        "rc": rc,
        **({"ended": 1042.0} if rc is not None else {}),
        **more,
    }
    (folder / "ui_launch.json").write_text(json.dumps(record))


def write_eval(folder: Path, records: list[dict[str, Any]], config: Path, rc: int | None, pid: int = DEAD_PID) -> Path:
    """An eval launched from the UI: its launch record, its log and ``eval.jsonl``; no metrics at all."""
    folder.mkdir(parents=True)
    with (folder / "eval.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    (folder / "ui.log").write_text(f"$ -m rlfcore eval {config}\neval 2/2 rows  reward 0.500\n")
    write_launch(folder, "eval", config, rc, pid)
    return folder


def write_trained(folder: Path, step_records: list[dict[str, Any]], saved: list[dict[str, Any]], config: Path) -> Path:
    """A healthy run launched from the UI and finished: 3 GRPO steps whose metrics cover all their samples
    (``step_records``), of which each step saved only ``saved`` (``trainer.samples_per_step: 4`` of a group
    of ``rollout.n: 8``, all right); KL and drift near 1e-7; 200 SFT steps, token accuracy every 50."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("plugins: []\ntrainer:\n  steps: 3\n  samples_per_step: 4\nrollout:\n  n: 8\n")
    with (folder / "sft_metrics.jsonl").open("w") as f:
        for step in range(1, 201):
            row: dict[str, Any] = {"step": step, "loss": 3.0 / step**0.5}
            if step % 50 == 0:
                row["token_accuracy"] = 0.5 + step / 500
            f.write(json.dumps(row) + "\n")
    (folder / "samples").mkdir()
    for step in range(1, 4):
        with (folder / "samples" / f"step_{step:06d}.jsonl").open("w") as f:
            f.writelines(json.dumps(r) + "\n" for r in saved)
        line = {
            **metrics_line(step, step_records),
            "kl": step * 1.1e-7,
            "logprob_drift": step * 4e-8,
            "active_fraction": 0.5,
        }
        with (folder / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": 3, "total_s": 42.0}))
    write_launch(folder, "train", config, 0)
    return folder


@pytest.fixture(scope="session")
def ui_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A runs folder with a finished run, a live one, and runs with a token mismatch, tool timeouts and a failed reward."""
    base = tmp_path_factory.mktemp("ui")
    plugin = base / "ui_test_tools.py"
    plugin.write_text(PLUGIN)
    tok = build_tokenizer(base / "model")
    config = write_config(base, plugin)
    good = roll(config, tok, ROWS["good"])
    sure = roll(config, tok, ROWS["sure"])
    runs = base / "runs"
    made = {
        "finished": write_run(runs / "finished", [good, good, good], base / "model"),
        "live": write_run(runs / "live", [good], base / "model", finished=False),
        "mismatch": write_run(runs / "mismatch", [roll(config, tok, ROWS["mismatch"])], base / "model"),
        "timeouts": write_run(runs / "timeouts", [roll(config, tok, ROWS["timeouts"] + ROWS["good"])], base / "model"),
        "badreward": write_run(
            runs / "badreward", [roll(config, tok, ROWS["badreward"] + ROWS["good"])], base / "model"
        ),
        "trained": write_trained(runs / "trained", good + sure, sure, config),
        "evaluated": write_eval(runs / "evaluated", good, config, rc=0),
        "stopped": write_run(runs / "stopped", [good], base / "model", finished=False, checkpoint=False),
        "orphaned": write_run(runs / "orphaned", [good], base / "model", finished=False),
    }
    (runs / "stopped" / "summary.json").write_text(json.dumps({"status": "stopped", "steps": 1}))
    write_launch(runs / "stopped", "train", config, 143, stopped=True)
    write_launch(runs / "orphaned", "train", config, None)  # its UI ended first: the exit code never came
    return {"base": base, "runs": runs, "config": config, "made": made, "good": good}


@pytest.fixture()
def client(ui_world: dict[str, Any]):
    from starlette.testclient import TestClient

    from rlfcore.ui import create_app

    app = create_app(ui_world["runs"], ui_world["config"], poll_ms=500, token=TOKEN)
    with TestClient(app, base_url=BASE, headers={"X-RLF-Token": TOKEN}) as c:
        yield c


def test_runs_list_shows_every_run_with_its_status(client, ui_world) -> None:
    page = client.get("/").text
    for name in ui_world["made"]:
        assert f'data-run="{name}"' in page
    table = client.get("/runs-table").text
    row = table.split('data-run="finished"')[1].split("</tr>")[0]
    assert "finished" in row and "3 / 3" in row and "0.500" in row  # half the samples answer right
    live = table.split('data-run="live"')[1].split("</tr>")[0]
    assert "running" in live  # written seconds ago, no summary


def test_compare_page_names_the_runs_and_refuses_unknown_ones(client) -> None:
    page = client.get("/compare?run=finished&run=live")
    assert page.status_code == 200 and "finished, live" in page.text
    assert client.get("/compare?run=nope").status_code == 404
    assert client.get("/run?run=../..").status_code == 404


def test_run_page_and_its_metrics_feed_pick_up_appended_lines(client, ui_world) -> None:
    live = ui_world["made"]["live"]
    page = client.get("/run?run=live").text
    assert 'id="charts"' in page and "/banner?run=live" in page and "/log?run=live" in page
    first = client.get("/api/metrics?run=live").json()
    assert [r["step"] for r in first["rows"]] == [1] and first["status"] == "running"
    append_step(live, 2, ui_world["good"])
    with (live / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "reward_me')  # half written: not served until complete
    more = client.get(f"/api/metrics?run=live&offset={first['offset']}").json()
    assert [r["step"] for r in more["rows"]] == [2]
    with (live / "metrics.jsonl").open("a") as f:
        f.write('an": 0.5}\n')
    last = client.get(f"/api/metrics?run=live&offset={more['offset']}").json()
    assert last["rows"] == [{"step": 3, "reward_mean": 0.5}]
    assert client.get("/api/metrics?run=live&file=config.yaml").status_code == 400
    assert client.get("/api/metrics?run=live&offset=x").status_code == 400


def test_banner_warns_of_failed_rewards_timeouts_and_mismatches(client) -> None:
    assert "reward error" in client.get("/banner?run=badreward").text
    assert "depart from a full rendering" in client.get("/banner?run=mismatch").text
    assert 'role="alert"' not in client.get("/banner?run=finished").text  # nothing wrong there


def row_of(client: Any, run: str) -> str:
    """Run ``run``'s row of the runs table."""
    return client.get("/runs-table").text.split(f'data-run="{run}"')[1].split("</tr>")[0]


def visible(page: str, button: str) -> bool:
    """Whether the run page renders the button of id ``button`` unhidden."""
    found = re.search(rf'<button id="{button}"[^>]*>', page)
    return found is not None and " hidden" not in found.group(0)


def test_a_finished_eval_run_shows_its_figures_not_a_stopped_training_run(client) -> None:
    """Issue 33: an eval launched from the UI that exited 0 read "stopped", "step 0", "No metrics.jsonl
    lines yet" and reward "–"."""
    row = row_of(client, "evaluated")
    assert "finished" in row and "eval: 8 trajectories" in row and "0.500" in row and "0m42s" in row, row
    page = client.get("/run?run=evaluated").text
    assert 'id="run-status">finished<' in page and 'id="run-trajectories">8<' in page
    assert "step <span" not in page and 'id="charts"' not in page and "SFT warm start" not in page
    assert "8 (2 rows) in eval.jsonl" in page and "0.5000 ± 0.5000" in page and "no_tool_call 4" in page
    assert not visible(page, "stop-button") and not visible(page, "resume-button")
    part = client.get("/eval-summary?run=evaluated").text
    assert 'data-status="finished"' in part and 'data-trajectories="8"' in part
    assert client.get("/trajectories?run=evaluated").text.count('class="sample-link"') == 8


def test_status_comes_from_the_exit_code_and_the_buttons_follow_it(client) -> None:
    """Stop only while the process runs; an ended process is never "running", however fresh its files."""
    assert "finished" in row_of(client, "trained")
    assert "stopped" in row_of(client, "stopped")
    assert "resumable" in row_of(client, "orphaned")  # launched, the UI ended first, its files are fresh
    trained = client.get("/run?run=trained").text
    assert not visible(trained, "stop-button") and not visible(trained, "resume-button")
    stopped = client.get("/run?run=stopped").text
    assert not visible(stopped, "stop-button") and visible(stopped, "resume-button")
    orphaned = client.get("/run?run=orphaned").text
    assert not visible(orphaned, "stop-button") and visible(orphaned, "resume-button")


def test_an_evals_status_is_its_exit_code(tmp_path: Path, ui_world: dict[str, Any]) -> None:
    from rlfcore.ui.runs import run_info, status

    cases = {"ok": (0, "finished"), "crash": (1, "failed"), "killed": (-15, "stopped"), "unknown": (None, "ended")}
    for name, (rc, expected) in cases.items():
        run = write_eval(tmp_path / name, ui_world["good"], ui_world["config"], rc)
        assert status(run) == expected, (name, status(run))
    (tmp_path / "ok" / "eval.difficulty.jsonl").write_text('{"id": "q1", "samples": 4, "solve_rate": 0.5}\n')
    info = run_info(tmp_path, tmp_path / "ok")  # rlf eval --repeats's row file beside it holds no trajectories
    assert info.kind == "eval" and info.evaluation and info.evaluation["trajectories"] == 8 and info.reward == 0.5
    (tmp_path / "byhand").mkdir()  # rlf eval --out RUN/eval.jsonl from a shell, still writing
    (tmp_path / "byhand" / "eval.jsonl").write_text(json.dumps(ui_world["good"][0]) + "\n")
    assert status(tmp_path / "byhand") == "running"


def test_banner_judges_only_the_groups_the_saved_samples_hold_whole(client) -> None:
    """Issue 33: a healthy run saving 4 samples a step (half a group of 8, all right) was warned of "no
    reward variance in any of the 1 groups"."""
    from rlfcore.ui.runs import warnings

    assert 'role="alert"' not in client.get("/banner?run=trained").text
    assert 'role="alert"' not in client.get("/banner?run=evaluated").text
    alike = [{"row_id": "a", "reward": 1.0}] * 4
    assert any("no reward variance in any of the 1 whole groups" in w for w in warnings([], alike, 4))
    assert warnings([], alike, 8) == [] and warnings([], alike, None) == []
    flat = [{"step": s, "reward_std": 0.4, "active_fraction": 0.0} for s in (1, 2, 3)]
    assert any("active_fraction is 0" in w for w in warnings(flat, alike, 8))


def test_log_tail_shows_the_last_lines(client, ui_world) -> None:
    assert "No log file" in client.get("/log?run=finished").text
    log = ui_world["made"]["finished"] / "train.log"
    log.write_text("".join(f"line {i}\n" for i in range(500)) + "partial")
    try:
        text = client.get("/log?run=finished").text
        assert "line 499" in text and "line 439" not in text and "partial" not in text
    finally:
        log.unlink()


def test_trajectories_group_samples_and_filter(client) -> None:
    page = client.get("/trajectories?run=finished").text
    assert 'data-row="q1"' in page and 'data-row="q2"' in page and "8 of 8 samples" in page
    assert client.get("/trajectories?run=finished&min_reward=1").text.count('class="sample-link"') == 4
    assert client.get("/trajectories?run=finished&stop=no_tool_call").text.count('class="sample-link"') == 4
    assert "1 of 8" not in client.get("/trajectories?run=finished&q=4%2B4").text
    assert client.get("/trajectories?run=finished&q=4%2B4").text.count('class="sample-link"') == 4
    timeouts = client.get("/trajectories?run=timeouts&tool_error=1").text
    assert 'data-row="slow"' in timeouts and 'data-row="q1"' not in timeouts
    assert "mismatch" in client.get("/trajectories?run=mismatch&mismatch=1").text
    assert client.get("/trajectories?run=finished&min_reward=high").status_code == 400
    assert client.get("/trajectories?run=finished&file=step_000009.jsonl").status_code == 404


def test_sample_page_shows_turns_tool_results_and_errors(client) -> None:
    one = client.get("/sample?run=timeouts&i=0").text
    assert "slow" in one and "timeout" in one and "timed out" in one.lower()
    both = client.get("/sample?run=finished&i=0&j=1")
    assert both.status_code == 200 and both.text.count('class="sample"') == 2 and "cols-2" in both.text
    call = re.search(r"<b>add</b> <code>(.*?)</code>", both.text)  # arguments: a dict or a JSON string, as recorded
    assert call and json.loads(html.unescape(call.group(1))) == {"a": 2, "b": 3}
    bad = client.get("/sample?run=badreward&i=0").text
    assert "scorer failed on purpose" in bad
    assert client.get("/sample?run=finished").status_code == 400
    assert client.get("/sample?run=finished&i=99").status_code == 404


def test_token_view_highlights_the_mismatch_with_its_reason(client) -> None:
    page = client.get("/tokens?run=mismatch&i=0").text
    assert 'id="mismatch"' in page and "departs from a full rendering" in page
    marked = re.findall(r'class="tok (prompt|generated|observation) mismatch', page)
    assert marked, "no token carries the mismatch class"
    assert page.count("first-mismatch") == 1  # where the departure starts
    assert "&lt;|im_start|&gt;" in page  # decoded with the run's own tokenizer, not shown as ids
    assert "--heat:0.8" in page or "--heat:0.96" in page  # logprobs drive the heat map
    clean = client.get("/tokens?run=finished&i=0").text
    assert 'id="mismatch"' not in clean and "matches a full rendering" in clean


def test_tools_page_lists_tools_and_calls_them_through_the_executor(client, ui_world) -> None:
    page = client.get(f"/tools?config={ui_world['config']}").text
    assert 'data-tool="add"' in page and 'data-tool="slow"' in page and "Add two integers." in page
    plugin = page.split('name="plugin" value="')[1].split('"')[0]
    ok = client.post(
        "/tools/call",
        data={"config": str(ui_world["config"]), "plugin": plugin, "name": "add", "arguments": '{"a": 20, "b": 22}'},
    ).text
    assert '<pre class="result-content">42</pre>' in ok and 'error: <span class="ok">none' in ok
    slow = client.post(
        "/tools/call", data={"config": str(ui_world["config"]), "plugin": plugin, "name": "slow", "arguments": "{}"}
    ).text
    assert "timeout" in slow
    bad = client.post(
        "/tools/call", data={"config": str(ui_world["config"]), "plugin": plugin, "name": "add", "arguments": "{a: 1"}
    ).text
    assert "malformed" in bad and "not JSON" in bad
    schema = client.post(
        "/tools/call",
        data={"config": str(ui_world["config"]), "plugin": plugin, "name": "add", "arguments": '{"a": "x", "b": 1}'},
    ).text
    assert "schema" in schema
    stats = client.get(f"/tools?run=timeouts&config={ui_world['config']}").text
    assert "error kinds: timeout" in stats
    outside = client.get("/tools?config=/nonexistent/run.yaml")
    assert outside.status_code == 403 and "outside the folders this UI serves" in outside.text
    missing = client.get(f"/tools?config={ui_world['base']}/nonexistent.yaml").text
    assert "no such file" in missing


def test_data_page_previews_rows_and_validates_configs(client, ui_world) -> None:
    page = client.get(f"/data?config={ui_world['config']}").text
    assert "What is 2+3?" in page and "Prompt length" in page and "tokens" in page
    bad = client.post(
        "/config/validate",
        data={"text": "rollout:\n  n: many\n  max_turnz: 3\ntrainer: {steps: -1}\n", "overrides": ""},
    ).text
    assert "rollout.n" in bad and "rollout.max_turnz" in bad and "did you mean" in bad
    assert "(yaml)" in client.post("/config/validate", data={"text": "a: [", "overrides": ""}).text
    good = client.post("/config/validate", data={"text": "rollout: {n: 2}", "overrides": "trainer.steps=5"}).text
    assert "valid" in good and "steps: 5" in good


def test_launch_stop_and_refusals(client, ui_world) -> None:
    """A real ``rlf eval`` launched and stopped; verl's dry run shown; bad launches refused."""
    refused = client.post(
        "/launch", data={"kind": "train", "config": str(ui_world["config"]), "run_name": "finished"}
    ).text
    assert "already holds a run" in refused
    assert (
        "must be a folder under"
        in client.post(
            "/launch", data={"kind": "train", "config": str(ui_world["config"]), "run_name": "../escape"}
        ).text
    )
    assert (
        "no such config"
        in client.post("/launch", data={"config": str(ui_world["base"] / "nope.yaml"), "run_name": "x"}).text
    )
    done = client.post(
        "/launch",
        data={"kind": "eval", "config": str(ui_world["config"]), "run_name": "launched"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/run?run=launched"
    run = ui_world["runs"] / "launched"
    record = json.loads((run / "ui_launch.json").read_text())
    assert record["kind"] == "eval" and record["rc"] is None
    assert "running" in client.get("/runs-table").text.split('data-run="launched"')[1].split("</tr>")[0]
    stopped = client.post("/stop?run=launched").text
    assert "stopped (exit code" in stopped
    deadline = time.time() + 10
    while json.loads((run / "ui_launch.json").read_text())["rc"] is None and time.time() < deadline:
        time.sleep(0.1)
    ended = json.loads((run / "ui_launch.json").read_text())
    assert ended["rc"] not in (None, 0) and ended["stopped"] is True
    assert "stopped" in row_of(client, "launched")  # the Stop button ended it: not a failure
    assert not visible(client.get("/run?run=launched").text, "stop-button")
    assert "$ -m rlfcore eval" in (run / "ui.log").read_text() or "rlfcore eval" in (run / "ui.log").read_text()
    assert "already ended" in client.post("/stop?run=launched").text
    assert "only runs started from the launch page" in client.post("/resume?run=finished").text


@pytest.mark.slow
def test_a_100_mb_samples_file_is_paged_not_loaded(tmp_path: Path, ui_world: dict[str, Any], capsys) -> None:
    """Index once in a streaming pass, then each page reads only its lines (timed, memory bounded)."""
    import tracemalloc

    from starlette.testclient import TestClient

    from rlfcore.ui import create_app

    run = tmp_path / "runs" / "big"
    (run / "samples").mkdir(parents=True)
    (run / "config.yaml").write_text("trainer: {steps: 1}\n")
    template = ui_world["good"][0]
    path = run / "samples" / "step_000001.jsonl"
    with path.open("w") as f:
        i = 0
        while f.tell() < 100 << 20:
            rec = {
                **template,
                "id": f"r{i // 8}#{i % 8}",
                "row_id": f"r{i // 8}",
                "prompt_ids": list(range(6000)),
                "reward": (i % 8) / 8,
            }
            f.write(json.dumps(rec) + "\n")
            i += 1
    size_mb = path.stat().st_size / 2**20
    pages = {
        "page 21": "/trajectories?run=big&page=20",
        "first page again": "/trajectories?run=big",
        "last sample": f"/sample?run=big&i={i - 1}",
        "its tokens": f"/tokens?run=big&i={i - 1}",
        "run page": "/run?run=big",
        "banner": "/banner?run=big",
    }
    with TestClient(create_app(tmp_path / "runs", token=TOKEN), base_url=BASE, headers={"X-RLF-Token": TOKEN}) as c:
        t0 = time.perf_counter()
        first = c.get("/trajectories?run=big")  # builds the index
        index_s = time.perf_counter() - t0
        assert first.status_code == 200 and f"{i} of {i} samples" in first.text
        took = {}
        for name, url in pages.items():
            t0 = time.perf_counter()
            got = c.get(url)
            took[name] = time.perf_counter() - t0
            assert got.status_code == 200, (url, got.text[-500:])
            if name == "page 21":
                assert 'data-row="r200"' in got.text
        tracemalloc.start()  # a second pass, measured for memory only (tracing slows Python down)
        for url in pages.values():
            c.get(url)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 40 << 20, f"pages after the index peaked at {peak / 2**20:.0f} MiB for a {size_mb:.0f} MB file"
    t0 = time.perf_counter()
    with path.open("rb") as f:  # the floor the index is up against: parsing every line once
        for line in f:
            json.loads(line)
    parse_s = time.perf_counter() - t0
    with capsys.disabled():
        print(
            f"\n[ui] {size_mb:.0f} MB samples file, {i} trajectories: first visit (index + page) {index_s:.2f} s "
            f"(json.loads of every line alone: {parse_s:.2f} s); then "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in took.items())
            + f"; peak memory of those pages {peak / 2**20:.1f} MiB"
        )


def test_docs_page_shows_screenshots_that_exist_and_are_small() -> None:
    """docs/ui.md's pictures are in docs/img (made by scripts/ui-docs-images.py), each small, none unused."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    shown = re.findall(r"!\[[^\]]*\]\((img/[^)]+)\)", (docs / "ui.md").read_text())
    assert shown, "docs/ui.md shows no screenshot"
    for rel in shown:
        path = docs / rel
        assert path.is_file(), f"docs/ui.md shows {rel}, which does not exist"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{rel} is not a PNG"
        assert path.stat().st_size < 150_000, f"{rel} is {path.stat().st_size // 1000} kB: shrink it"
    unused = sorted(p.name for p in (docs / "img").glob("ui-*.png") if f"img/{p.name}" not in shown)
    assert not unused, f"docs/img holds screenshots docs/ui.md does not show: {', '.join(unused)}"


def test_rlf_ui_refuses_a_runs_folder_that_does_not_exist(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rlfcore.cli import cli

    missing = tmp_path / "nope"
    out = CliRunner().invoke(cli, ["ui", str(missing)])
    assert out.exit_code != 0 and f"no such folder: {missing}" in out.output
    bad_port = CliRunner().invoke(cli, ["ui", str(tmp_path), "--port", "70000"])
    assert bad_port.exit_code == 2 and "--port" in bad_port.output


def test_an_evals_figures_give_pass_at_k_as_rlf_eval_reports_it(client, ui_world) -> None:
    """pass@k by counting: the share of k-sample draws of a row holding a sample with reward 1, averaged over rows."""
    import itertools

    records = [json.loads(line) for line in (ui_world["runs"] / "evaluated" / "eval.jsonl").read_text().splitlines()]
    rows: dict[str, list[float]] = {}
    for r in records:
        rows.setdefault(r["row_id"], []).append(r["reward"])
    n = min(len(v) for v in rows.values())
    part = client.get("/eval-summary?run=evaluated").text
    for k in (1, 2, n):
        draws = [[any(x >= 1.0 for x in pick) for pick in itertools.combinations(v, k)] for v in rows.values()]
        expected = sum(sum(d) / len(d) for d in draws) / len(draws)
        assert f'<th>pass@{k}</th><td class="pass-at-k">{expected:.3f}</td>' in part, part
