"""``rlf ui``: every route, through Starlette's TestClient, over run folders these tests make.

The run folders hold real trajectories: the real loop, executor and reward pipeline, with a real BPE
tokenizer (built here from text, as ``rlf init-model`` does) and its chat template. Only the policy is
a stand-in, :class:`ScriptedEngine` playing fixed texts (no model can be trained in a unit test), with
made-up logprobs so the heat map has something to show. Files are written line by line in the format
``RunDir`` writes (``Trajectory.record()``), without importing torch.
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("tokenizers")

from tests.support import ROOT
from tests.support.ui import BASE, TOKEN, append_step, write_eval


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
    docs = ROOT / "docs"
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
