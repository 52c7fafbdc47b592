"""``rlf ui`` watching the embedded default train: a real ``rlf ui`` server and a real ``rlf train`` of
examples/calculator (shortened as in test_calculator_example: a smaller tiny model, few steps), both
as commands in their own processes, with the UI seen over HTTP and, where Chromium is installed, in
headless Chromium too.

GRPO steps of this tiny model take a fraction of a second, so to look at the run "while it trains"
without a race the test stops the trainer (SIGSTOP) as soon as its first metrics line is written, looks,
and lets it go on (SIGCONT). Screenshots go to ``$RLF_UI_SCREENSHOTS`` (default: a temporary folder).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

pytest.importorskip("uvicorn")
pytest.importorskip("rlf_mcp", reason="rlf-mcp is not installed (pip install -e plugins/rlf-mcp)")
httpx = pytest.importorskip("httpx")

EXAMPLE = ROOT / "examples" / "calculator"
STEPS, SFT_STEPS = 4, 5
SHORT = [
    f"sft.steps={SFT_STEPS}",
    "sft.batch_size=8",
    f"trainer.steps={STEPS}",
    "trainer.prompts_per_step=2",
    "rollout.n=4",
    "trainer.samples_per_step=8",
    "model.init.hidden_size=32",
    "model.init.num_layers=1",
    "model.init.intermediate_size=64",
]
CHROMIUM = "/usr/bin/chromium"
UI_TOKEN = "train-ui-test-token-0123456789"


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    out["PYTHONPATH"] = str(ROOT)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], log: Path, cwd: Path | None = None) -> subprocess.Popen:
    """``python -m rlfcore ARGV`` in its own process, its output to ``log`` (a pipe nobody reads could fill)."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rlfcore", *argv], cwd=cwd, env=env(), stdout=out, stderr=subprocess.STDOUT
        )


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def wait_for(
    what: str, check: Callable[[], Any], timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None
) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (and the process's output)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the process ended first (rc {proc.returncode}):\n{tail(log) if log else ''}")
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture()
def example(tmp_path: Path) -> Path:
    folder = tmp_path / "calculator"
    folder.mkdir()
    for name in ("run.yaml", "questions.jsonl", "demos.jsonl", "eval.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    (tmp_path / "runs").mkdir()
    return folder


@pytest.fixture()
def ui_server(example: Path) -> Iterator[httpx.Client]:
    """``rlf ui RUNS`` on a free loopback port, as a user starts it."""
    port = free_port()
    log = example.parent / "ui.out"
    proc = start(
        [
            "ui",
            str(example.parent / "runs"),
            "--port",
            str(port),
            "--poll",
            "0.3",
            "--config",
            str(example / "run.yaml"),
            "--token",
            UI_TOKEN,
        ],
        log,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, headers={"X-RLF-Token": UI_TOKEN})

    def up() -> bool:
        try:
            return client.get("/").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for("rlf ui to answer", up, 60, proc, log)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=20)


def row_of(client: httpx.Client, run: str) -> str:
    table = client.get("/runs-table").text
    assert f'data-run="{run}"' in table, table[-2000:]
    return table.split(f'data-run="{run}"')[1].split("</tr>")[0]


@pytest.mark.slow
def test_rlf_ui_shows_the_embedded_default_while_it_trains_and_after(  # noqa: PLR0915 - one scenario, in order
    example: Path, ui_server: httpx.Client, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    shots = Path(os.environ.get("RLF_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    ui = ui_server
    run_dir = example.parent / "runs" / "calculator"
    log = example / "train.out"
    train = start(["train", "run.yaml", "--run-dir", str(run_dir), *SHORT], log, cwd=example)
    browser = None
    try:
        metrics = run_dir / "metrics.jsonl"
        # Watched on disk, not through the UI, so the trainer is held as soon as its first step is written.
        wait_for("the first GRPO step", lambda: metrics.exists() and metrics.stat().st_size > 0, 240, train, log)
        train.send_signal(signal.SIGSTOP)  # hold the run mid-training while we look
        try:
            written = [json.loads(x)["step"] for x in metrics.read_text().split("\n")[:-1]]  # whole lines only
            feed = ui.get("/api/metrics?run=calculator").json()
            seen = [r["step"] for r in feed["rows"]]
            assert seen == written and seen == list(range(1, len(seen) + 1)) and len(seen) < STEPS, (seen, written)
            assert feed["status"] == "running"
            row = row_of(ui, "calculator")
            assert "running" in row and f"{seen[-1]} / {STEPS}" in row, row
            page = ui.get("/run?run=calculator")
            assert page.status_code == 200 and 'id="charts"' in page.text
            sft = ui.get("/api/metrics?run=calculator&file=sft_metrics.jsonl").json()["rows"]
            assert [r["step"] for r in sft] == list(range(1, SFT_STEPS + 1)) and all(
                "loss" in r for r in sft
            )  # the warm start's curve
            trajs = ui.get("/trajectories?run=calculator").text
            assert trajs.count('class="sample-link"') == 8, trajs[
                -2000:
            ]  # 2 prompts x 4 samples, all kept (samples_per_step=8)
            assert "<td>mcp</td>" in trajs  # the calculator's environment
            if Path(CHROMIUM).exists():
                browser = Browser(str(ui.base_url))
                browser.page.goto(f"{ui.base_url}/?token={UI_TOKEN}")  # the URL rlf ui prints: it sets the cookie
                browser.page.goto(f"{ui.base_url}/run?run=calculator")
                browser.points(len(seen))
                assert browser.page.inner_text("#run-status") == "running"
                browser.page.screenshot(path=str(shots / "calculator-live.png"), full_page=True)
        finally:
            train.send_signal(signal.SIGCONT)
        offset, grown = feed["offset"], []

        def finished() -> bool:
            nonlocal offset
            more = ui.get(f"/api/metrics?run=calculator&offset={offset}").json()
            grown.extend(r["step"] for r in more["rows"])
            offset = more["offset"]
            return more["status"] == "finished"

        wait_for("the run to finish in the UI", finished, 240, None)
        assert train.wait(timeout=120) == 0, tail(log)
        assert seen + grown == list(range(1, STEPS + 1))  # the rest arrived through the offset feed, once each
        row = row_of(ui, "calculator")
        assert "finished" in row and f"{STEPS} / {STEPS}" in row, row
        assert ui.get(f"/trajectories?run=calculator&file=step_{STEPS:06d}.jsonl").status_code == 200
        assert ui.get("/tokens?run=calculator&i=0").status_code == 200  # decoded with the run's checkpoint tokenizer
        if browser is not None:
            browser.points(STEPS)
            browser.page.wait_for_function(
                "document.getElementById('run-status').textContent == 'finished'", timeout=10_000
            )
            assert browser.page.inner_text("#run-step") == str(STEPS)
            browser.page.screenshot(path=str(shots / "calculator-finished.png"), full_page=True)
            browser.page.goto(f"{ui.base_url}/")
            browser.page.wait_for_selector('tr[data-run="calculator"]')
            browser.page.screenshot(path=str(shots / "calculator-runs.png"), full_page=True)
            browser.page.goto(f"{ui.base_url}/trajectories?run=calculator")
            browser.page.wait_for_selector(".group")
            browser.page.screenshot(path=str(shots / "calculator-trajectories.png"), full_page=True)
            browser.close()
            browser = None
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\n[ui] screenshots of the calculator run: calculator-*.png in {shots}")
    finally:
        if browser is not None:
            browser.close()
        if train.poll() is None:
            train.send_signal(signal.SIGCONT)
            train.kill()
            train.wait(timeout=20)


class Browser:
    """Headless Debian Chromium through Playwright, failing on any JavaScript error."""

    def __init__(self, base: str) -> None:
        sync_api = pytest.importorskip("playwright.sync_api")
        self._pw = sync_api.sync_playwright().start()
        self._browser = self._pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        self.page = self._browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.set_default_timeout(60_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def points(self, n: int) -> None:
        """Wait until the reward curve has ``n`` points."""
        self.page.wait_for_function(
            f"(document.querySelector('#charts .chart[data-chart=\"reward\"]') || {{dataset: {{}}}}).dataset.points == '{n}'",
            timeout=15_000,
        )

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()
        assert not self.errors, f"JavaScript errors: {self.errors}"
