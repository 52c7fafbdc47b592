"""``rlf ui`` in a real browser: Debian's Chromium, headless, driven by Playwright, against a real
uvicorn server on loopback over the route tests' run folders (``tests.support.ui``).

Chromium is installed by ``scripts/install-chromium.sh`` (Playwright's own download cannot work
offline); without it these tests skip. Screenshots of each page go to ``$RLF_UI_SCREENSHOTS``
(default: a temporary folder, printed).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ui import append_step, write_eval, write_launch, write_run

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-gpu",
    "--disable-component-update",
    "--disable-sync",
    # Names that resolve to loopback, as DNS rebinding makes them: a foreign Host and a cross-site attacker.
    "--host-resolver-rules=MAP rebound.example 127.0.0.1, MAP attacker.example 127.0.0.1",
]
TOKEN = "browser-test-token-0123456789"

if not Path(CHROMIUM).exists():
    if os.environ.get(
        "RLF_REQUIRE_BROWSER"
    ):  # set by .ci/run, which installs it: a skip there would hide a broken install
        raise RuntimeError(
            f"no Chromium at {CHROMIUM} although RLF_REQUIRE_BROWSER is set: scripts/install-chromium.sh failed?"
        )
    pytest.skip(f"no Chromium at {CHROMIUM}: run scripts/install-chromium.sh", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("tokenizers")  # the run folders are made with a real BPE tokenizer
# the run folders are made before Playwright starts: its sync API runs an event loop in this thread, under
# which their rollouts cannot run
pytestmark = pytest.mark.usefixtures("ui_world")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Path]:
    """Where the screenshots go; named on the terminal (without ``-s`` too) when the module ends."""
    folder = Path(os.environ.get("RLF_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"\n[ui] browser screenshots: {', '.join(sorted(p.name for p in folder.glob('*.png')))} in {folder}"
        )


@pytest.fixture(scope="module")
def server(ui_world: dict[str, Any]) -> Iterator[str]:
    from rlfcore.ui import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(
            create_app(ui_world["runs"], ui_world["config"], poll_ms=400, token=TOKEN),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def logged_in(browser: Any, server: str, width: int) -> Iterator[Any]:
    """A page ``width`` pixels wide whose browser opened the URL ``rlf ui`` prints, with its token, once;
    failing on any JavaScript error."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    p = context.new_page()
    p.set_default_timeout(60_000)  # CI's two cores are shared: a slow page is not a broken one
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    p.goto(f"{server}/?token={TOKEN}")
    assert p.url == f"{server}/"  # the token is traded for a cookie and leaves the address bar
    yield p
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


@pytest.fixture()
def page(browser: Any, server: str) -> Iterator[Any]:
    yield from logged_in(browser, server, 1280)


@pytest.fixture()
def wide(browser: Any, server: str) -> Iterator[Any]:
    """A logged-in page on a 1400 px wide screen."""
    yield from logged_in(browser, server, 1400)


def open_run(page: Any, server: str, run: str) -> None:
    """Open ``run``'s page and wait until its banner's first poll has been answered and swapped in."""
    with page.expect_response(lambda r: "/banner?" in r.url):
        page.goto(f"{server}/run?run={run}")
    page.wait_for_function(
        "!['htmx-request', 'htmx-swapping', 'htmx-settling'].some(c => document.getElementById('banner').classList.contains(c))"
    )


BLUE_PIXELS = """(title) => {
    // The pixels of the chart's canvas in its first series' colour (#1f77b4): what its line and points drew.
    const c = document.querySelector('.chart[data-chart="' + title + '"] canvas');
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4)
        if (Math.abs(d[i] - 31) < 30 && Math.abs(d[i + 1] - 119) < 30 && Math.abs(d[i + 2] - 180) < 30 && d[i + 3] > 100) n++;
    return n; }"""


def test_a_finished_train_run_status_charts_banner_and_layout(wide: Any, server: str, shots: Path) -> None:
    """Issue 33 on a healthy finished run launched from the UI: no Stop, no alarm about the 4 samples it
    saves a step, SFT token accuracy (every 50 steps) drawn, KL ticks near 1e-7 readable, the width used."""
    page = wide
    open_run(page, server, "trained")
    page.wait_for_selector('#charts .chart[data-chart="KL and logprob drift"] canvas')
    page.wait_for_selector('#sft-charts .chart[data-chart="SFT token accuracy"] canvas')
    assert page.inner_text("#run-status") == "finished" and page.inner_text("#run-step") == "3"
    assert page.locator("#stop-button").is_hidden() and page.locator("#resume-button").is_hidden()
    assert page.locator("#banner .banner").count() == 0, page.inner_text("#banner")
    page.wait_for_function(f"({BLUE_PIXELS})('SFT token accuracy') > 100", timeout=10_000)
    labels = page.evaluate(
        """() => document.querySelector('.chart[data-chart="KL and logprob drift"]')._chart.axes[1]._values"""
    )
    assert len(labels) > 2 and len(set(labels)) == len(labels), labels  # every tick read "0"
    assert all(v == "0" or "e-" in v for v in labels), labels
    box = page.evaluate("""() => {
        const all = document.getElementById('charts').getBoundingClientRect();
        return {right: all.right, width: all.width, charts: [...document.querySelectorAll('#charts .chart')].map(c => {
            const b = c.getBoundingClientRect();
            return {top: b.top, right: b.right, width: b.width, canvas: c.querySelector('canvas').getBoundingClientRect().width};
        })}; }""")
    first_row = [c for c in box["charts"] if abs(c["top"] - box["charts"][0]["top"]) < 2]
    assert len(first_row) >= 3 and max(c["right"] for c in first_row) >= box["right"] - 2, box
    assert sum(c["width"] for c in first_row) >= 0.95 * box["width"], box
    assert all(c["canvas"] >= c["width"] - 24 for c in box["charts"]), box  # each chart fills its box
    page.screenshot(path=str(shots / "run-finished-1400.png"), full_page=True)


def test_an_eval_run_follows_its_process_to_finished(
    page: Any, server: str, shots: Path, ui_world: dict[str, Any]
) -> None:
    """Issue 33: an eval launched from the UI that exited 0 showed "stopped", "step 0", no metrics and no reward."""
    good = ui_world["good"]
    process = subprocess.Popen(["sleep", "300"])  # stands in for the rlf eval the launch page started
    try:
        run = write_eval(ui_world["runs"] / "eval-live", good[:4], ui_world["config"], rc=None, pid=process.pid)
        open_run(page, server, "eval-live")
        assert page.inner_text("#run-status") == "running" and page.inner_text("#run-trajectories") == "4"
        assert page.locator("#stop-button").is_visible()
        with (run / "eval.jsonl").open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in good[4:])
    finally:
        process.kill()
        process.wait()
    write_launch(run, "eval", ui_world["config"], 0)
    page.wait_for_function("document.getElementById('run-status').textContent == 'finished'", timeout=10_000)
    assert page.locator("#stop-button").is_hidden()
    page.wait_for_function("document.getElementById('run-trajectories').textContent == '8'", timeout=10_000)
    assert page.inner_text("#eval-reward") == "0.5000 ± 0.5000"
    assert "8 (2 rows) in eval.jsonl" in page.inner_text("#eval-summary")
    body = page.inner_text("main")
    assert "step 0" not in body and "No metrics.jsonl" not in body and page.locator("#charts").count() == 0
    assert page.locator("#banner .banner").count() == 0
    page.screenshot(path=str(shots / "run-eval.png"), full_page=True)
    page.goto(server + "/")
    row = page.inner_text('tr[data-run="eval-live"]')
    assert "finished" in row and "eval: 8 trajectories" in row and "0.500" in row, row


def test_a_stopped_run_offers_resume_not_stop(page: Any, server: str, shots: Path) -> None:
    open_run(page, server, "stopped")
    page.wait_for_selector('#charts .chart[data-chart="reward"] canvas')
    page.wait_for_function("document.getElementById('run-status').textContent == 'stopped'")
    assert page.locator("#stop-button").is_hidden() and page.locator("#resume-button").is_visible()
    assert page.locator("#banner .banner").count() == 0
    assert page.get_attribute('#charts .chart[data-chart="reward"]', "data-points") == "1"
    page.screenshot(path=str(shots / "run-stopped.png"), full_page=True)


def test_runs_list_and_compare(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/")
    page.wait_for_selector('tr[data-run="finished"]')
    page.screenshot(path=str(shots / "runs.png"), full_page=True)
    page.check('input[value="finished"]')
    page.check('input[value="timeouts"]')
    page.evaluate("""() => { window.swaps = 0;
        document.getElementById('runs-table').addEventListener('htmx:afterSwap', () => window.swaps++); }""")
    page.wait_for_function("window.swaps >= 1")  # the table refreshed itself since: the ticks must survive it
    assert page.is_checked('input[value="finished"]') and page.is_checked('input[value="timeouts"]')
    assert not page.is_checked('input[value="live"]')
    page.click("#compare-button")
    page.wait_for_selector('#compare .chart[data-chart="reward_mean"] canvas')
    assert page.locator("#compare .u-legend").first.inner_text().count("finished") >= 1
    page.screenshot(path=str(shots / "compare.png"), full_page=True)


def test_live_curve_gains_a_point_when_a_metrics_line_is_appended(
    page: Any, server: str, shots: Path, ui_world: dict[str, Any]
) -> None:
    live = ui_world["made"]["live"]
    page.goto(server + "/run?run=live")
    page.wait_for_selector('#charts .chart[data-chart="reward"] canvas')
    before = int(page.get_attribute('#charts .chart[data-chart="reward"]', "data-points"))
    step = before + 1
    answered = [r for r in ui_world["good"] if r["stop_reason"] == "answer"]  # this step logs no stop/no_tool_call
    append_step(live, step, answered)
    page.wait_for_function(
        f"document.querySelector('#charts .chart[data-chart=\"reward\"]').dataset.points == '{step}'", timeout=10_000
    )
    assert page.inner_text("#run-step") == str(step)  # the header follows the feed too
    last = dict(
        page.evaluate("""() => {
        const c = document.querySelector('#charts .chart[data-chart="stop reasons (samples per step)"]')._chart;
        return c.series.slice(1).map((s, i) => [s.label, c.data[i + 1][c.data[0].length - 1]]); }""")
    )
    assert last == {"stop/answer": len(answered), "stop/no_tool_call": 0}, (
        last
    )  # a reason a step did not see is 0, not a gap
    for title in (
        "tool calls and errors",
        "stop reasons (samples per step)",
        "KL and logprob drift",
        "step time split (s)",
    ):
        assert page.locator(f'#charts .chart[data-chart="{title}"] canvas').count() == 1, title
    (live / "train.log").write_text("step 1 reward 0.5\nstep 2 reward 0.5\n")
    page.wait_for_selector("#log pre.log", timeout=10_000)
    assert "step 2 reward" in page.inner_text("#log")
    page.screenshot(path=str(shots / "run-live.png"), full_page=True)


def test_banner_on_a_run_with_failed_rewards(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/run?run=badreward")
    page.wait_for_selector("#banner .banner", timeout=10_000)
    assert "reward error" in page.inner_text("#banner")
    page.wait_for_selector('#charts .chart[data-chart="reward"] canvas')
    page.screenshot(path=str(shots / "run-warning.png"), full_page=True)


def test_trajectory_and_its_token_view_show_the_mismatch(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/trajectories?run=mismatch")
    page.wait_for_selector(".group")
    page.screenshot(path=str(shots / "trajectories.png"), full_page=True)
    page.click("a.sample-link >> nth=0")
    page.wait_for_selector("article.sample")
    assert "template check" in page.inner_text("article.sample")
    page.screenshot(path=str(shots / "sample.png"), full_page=True)
    page.click("text=token view")
    page.wait_for_selector("#mismatch")
    first = page.locator(".tok.first-mismatch")
    assert first.count() == 1 and first.is_visible()
    assert page.locator(".tok.mismatch").count() >= 2
    colour = first.evaluate("e => getComputedStyle(e).outlineColor")
    assert colour == "rgb(213, 0, 0)", colour  # highlighted, not only marked in the HTML
    assert "rollout has" in page.inner_text("#mismatch")
    page.screenshot(path=str(shots / "tokens.png"), full_page=True)


def test_two_samples_side_by_side(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/trajectories?run=timeouts")
    page.click("text=side by side >> nth=0")
    page.wait_for_selector("article.sample >> nth=1")
    boxes = [page.locator("article.sample").nth(k).bounding_box() for k in (0, 1)]
    assert boxes[0]["x"] < boxes[1]["x"] and abs(boxes[0]["y"] - boxes[1]["y"]) < 2  # columns, not stacked
    assert "timeout" in page.inner_text("article.sample >> nth=0")
    page.screenshot(path=str(shots / "side-by-side.png"), full_page=True)


def test_call_a_tool_from_the_tools_page(page: Any, server: str, shots: Path, ui_world: dict[str, Any]) -> None:
    page.goto(server + f"/tools?config={ui_world['config']}")
    tool = page.locator('section.tool[data-tool="add"]')
    tool.locator("textarea").fill(json.dumps({"a": 20, "b": 22}))
    tool.locator("button").click()
    tool.locator(".result-content").wait_for(timeout=15_000)
    assert tool.locator(".result-content").inner_text() == "42"
    assert "latency" in tool.locator(".tool-result").inner_text()
    slow = page.locator('section.tool[data-tool="slow"]')
    slow.locator("textarea").fill('{"seconds": 5}')
    slow.locator("button").click()
    slow.locator(".call-result.bad").wait_for(timeout=15_000)
    assert "timeout" in slow.inner_text()
    page.screenshot(path=str(shots / "tools.png"), full_page=True)


def test_validate_a_config_on_the_data_page(page: Any, server: str, shots: Path, ui_world: dict[str, Any]) -> None:
    page.goto(server + f"/data?config={ui_world['config']}")
    page.wait_for_selector("pre.rendered")
    page.fill('textarea[name="text"]', "rollout:\n  n: many\n  max_turnz: 3\n")
    page.click("text=Validate >> nth=-1")
    page.wait_for_selector("#validation .issues")
    text = page.inner_text("#validation")
    assert "rollout.n" in text and "rollout.max_turnz" in text
    page.screenshot(path=str(shots / "data.png"), full_page=True)


def test_without_the_token_every_page_is_refused(browser: Any, server: str) -> None:
    context = browser.new_context()
    try:
        p = context.new_page()
        for path in ("/", "/run?run=finished", "/data"):
            answer = p.goto(server + path)
            assert answer is not None and answer.status == 403, path
            assert "open the URL that `rlf ui` printed" in p.inner_text("body")
        assert p.goto(f"{server}/?token=not-the-token-0123456789").status == 403
    finally:
        context.close()


def test_a_foreign_host_is_refused_in_the_browser(page: Any, server: str) -> None:
    """DNS rebinding: rebound.example resolves to 127.0.0.1, so its pages reach the UI's port."""
    port = server.rsplit(":", 1)[1]
    answer = page.goto(f"http://rebound.example:{port}/")
    assert answer is not None and answer.status == 400 and "Invalid host header" in page.inner_text("body")


ATTACK = """<!doctype html><html><body>
<form id="f" method="post" action="{target}/launch">
<input name="kind" value="eval"><input name="config" value="{config}"><input name="run_name" value="attack">
<input name="overrides" value="mcp.servers.x.command=sh">
</form><script>document.getElementById("f").submit();</script></body></html>"""


@pytest.mark.parametrize("attacker", ["127.0.0.1", "attacker.example"])
def test_a_cross_origin_post_from_another_page_is_refused(
    page: Any, server: str, ui_world: dict[str, Any], attacker: str
) -> None:
    """The probe's attack in a logged-in browser: a page on another origin (another loopback port, which
    is the same site for cookies, or another site) auto-submits a form to /launch."""
    import http.server

    body = ATTACK.format(target=server, config=ui_world["config"]).encode()

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        with page.expect_navigation(url=f"{server}/launch"):
            page.goto(f"http://{attacker}:{evil.server_address[1]}/")
        text = page.inner_text("body")
        assert "rlf ui:" in text and ("cross-origin request refused" in text or "needs the UI's token" in text), text
        assert not (ui_world["runs"] / "attack").exists()
    finally:
        evil.shutdown()
        evil.server_close()


def test_an_asynchronous_runs_staleness_and_correction_are_charted(
    page: Any, server: str, shots: Path, ui_world: dict[str, Any]
) -> None:
    """Asynchronous GRPO (``trainer.max_staleness``) logs each step's staleness shares and its off-policy
    correction: both chart groups appear on its page, one series per age; a run that logs none shows neither."""
    good = ui_world["good"]
    folder = write_run(ui_world["runs"] / "asynchronous", [good, good], ui_world["base"] / "model")
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for line, old in zip(lines, (0.0, 0.4)):
        line.update({"staleness/0": 1 - old, "staleness/1": old, "is_gap_mean": 0.02, "is_gap_max": 0.5})
        line.update({"is_beyond_bound": 0.001, "is_weight_mean": 0.99, "wait_s": 0.3})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    open_run(page, server, "asynchronous")
    for title in ("staleness (share of tokens by updates old)", "off-policy correction"):
        page.wait_for_selector(f'#charts .chart[data-chart="{title}"] canvas', timeout=10_000)
    series = page.evaluate("""() => document.querySelector(
        '#charts .chart[data-chart="staleness (share of tokens by updates old)"]')._chart.series.slice(1).map(s => s.label)""")
    assert series == ["staleness/0", "staleness/1"]
    page.screenshot(path=str(shots / "run-asynchronous.png"), full_page=True)
    open_run(page, server, "finished")
    page.wait_for_selector('#charts .chart[data-chart="reward"] canvas')
    assert page.locator('#charts .chart[data-chart="off-policy correction"]').count() == 0
