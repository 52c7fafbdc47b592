"""``rlf ui`` refuses strangers: the token on every route, Origin and CSRF on changes, the ``Host`` check,
config files only inside the served folders, and overrides only from the allow-list.

Each test replays an attack the hardening probe ran against the UI (a cross-site form POST that set an
MCP server's command, a GET that read any file or imported a ``.py``) and asserts it is refused and had
no effect. The browser versions of the token, cross-origin and ``Host`` checks are in test_ui_browser.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from rlfcore.config import PATH_SETTINGS
from rlfcore.paths import source_header
from rlfcore.ui import create_app
from rlfcore.ui.access import Secret
from rlfcore.ui.allowed import check_overrides, override_allowed

TOKEN = "access-test-token-0123456789"
BASE = "http://127.0.0.1:8765"
CONFIG = """\
plugins: []
model:
  path: model
data:
  eval: rows.jsonl
trainer:
  steps: 1
"""


@pytest.fixture()
def world(tmp_path: Path) -> dict[str, Path]:
    """A runs folder, a config beside it, and a secret file and a Python file outside both."""
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    config = project / "run.yaml"
    config.write_text(CONFIG)
    (project / "rows.jsonl").write_text('{"id": "a", "prompt": "hi", "ground_truth": "x"}\n')
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("the user's private notes")
    marker = outside / "imported"
    evil = outside / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    return {"runs": project / "runs", "config": config, "secret": secret, "evil": evil, "marker": marker}


@pytest.fixture()
def app(world: dict[str, Path]) -> Iterator[TestClient]:
    with TestClient(create_app(world["runs"], world["config"], token=TOKEN), base_url=BASE) as c:
        yield c


def login(client: TestClient) -> None:
    """What the printed URL does in a browser: the token is traded for the cookie."""
    first = client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/"
    assert (
        "httponly" in first.headers["set-cookie"].lower() and "samesite=strict" in first.headers["set-cookie"].lower()
    )


def csrf_of(client: TestClient) -> str:
    found = re.search(r'"X-RLF-CSRF": "([0-9a-f]+)"', client.get("/").text)
    assert found, "the page carries no CSRF token for htmx"
    return found.group(1)


def test_every_route_needs_the_token(app: TestClient) -> None:
    for path in ("/", "/runs-table", "/data", "/tools", "/static/app.js", "/api/metrics?run=x"):
        refused = app.get(path)
        assert refused.status_code == 403 and "open the URL that `rlf ui` printed" in refused.text, path
    assert app.get("/?token=wrong-token-0123456789").status_code == 403
    assert app.get("/", headers={"X-RLF-Token": "wrong-token-0123456789"}).status_code == 403
    assert app.get("/", headers={"X-RLF-Token": TOKEN}).status_code == 200
    assert app.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_printed_url_logs_in_and_the_cookie_carries_on(app: TestClient) -> None:
    login(app)
    assert app.get("/").status_code == 200
    assert app.get("/static/app.js").status_code == 200
    kept = app.get(f"/data?token={TOKEN}&rows=2", follow_redirects=False)
    assert kept.headers["location"] == "/data?rows=2"  # the other parameters survive the login


def test_a_cross_origin_post_is_refused_even_with_the_cookie(app: TestClient, world: dict[str, Path]) -> None:
    """The probe's attack: another site's form posts to /launch with an MCP server command override."""
    login(app)
    marker = world["marker"].with_name("pwned")
    attack = {
        "kind": "eval",
        "config": str(world["config"]),
        "run_name": "attack",
        "overrides": f"mcp.servers.x.command=sh mcp.servers.x.args=[-c,'touch {marker}']",
    }
    no_origin = app.post("/launch", data=attack)
    assert no_origin.status_code == 403 and "cross-origin" in no_origin.text
    foreign = app.post("/launch", data=attack, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and "http://evil.example" in foreign.text
    same_no_csrf = app.post("/launch", data=attack, headers={"Origin": BASE})
    assert same_no_csrf.status_code == 403 and "CSRF" in same_no_csrf.text
    assert app.post("/launch", data=attack, headers={"Origin": BASE, "X-RLF-CSRF": "0" * 64}).status_code == 403
    own = app.post("/launch", data=attack, headers={"Origin": BASE, "X-RLF-CSRF": csrf_of(app)})
    assert own.status_code == 200 and "not allowed from the UI: mcp.servers.x.command, mcp.servers.x.args" in own.text
    time.sleep(0.5)
    assert not marker.exists() and not (world["runs"] / "attack").exists()


def test_the_token_in_a_url_cannot_change_anything(app: TestClient, world: dict[str, Path]) -> None:
    refused = app.post(f"/launch?token={TOKEN}", data={"config": str(world["config"])})
    assert refused.status_code == 403 and "X-RLF-Token" in refused.text


def test_a_foreign_host_is_refused(app: TestClient) -> None:
    """DNS rebinding: a page on evil.example resolves its name to 127.0.0.1 and calls the UI."""
    rebound = app.get("/", headers={"X-RLF-Token": TOKEN, "Host": "evil.example:8765"})
    assert rebound.status_code == 400 and "Invalid host header" in rebound.text
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765"):
        assert app.get("/", headers={"X-RLF-Token": TOKEN, "Host": host}).status_code == 200, host


def test_get_pages_read_no_file_outside_the_served_folders(app: TestClient, world: dict[str, Path]) -> None:
    auth = {"X-RLF-Token": TOKEN}
    for path in (f"/data?config={world['secret']}", f"/tools?config={world['secret']}"):
        page = app.get(path, headers=auth)
        assert page.status_code == 403 and "outside the folders this UI serves" in page.text, path
        assert "private notes" not in page.text
    escaped = app.get("/data?config=../../elsewhere/secret.txt", headers=auth)
    assert escaped.status_code == 403 and "private notes" not in escaped.text
    assert "plugins: []" in app.get(f"/data?config={world['config']}", headers=auth).text  # inside: shown


def test_get_pages_import_no_code(app: TestClient, world: dict[str, Path]) -> None:
    """The probe's second attack: an <img> tag whose URL adds a local plugin from elsewhere."""
    auth = {"X-RLF-Token": TOKEN}
    page = app.get(f"/data?config={world['config']}&overrides=local_plugins=[{world['evil']}]", headers=auth)
    assert page.status_code == 403 and "local_plugins" in page.text
    planted = world["config"].with_name("planted.yaml")
    planted.write_text(CONFIG + f"local_plugins: [{world['evil']}]\n")
    assert app.get(f"/data?config={planted}", headers=auth).status_code == 403
    assert app.get(f"/tools?config={planted}", headers=auth).status_code == 403
    text = app.post(
        "/config/validate",
        data={"text": f"local_plugins: [{world['evil']}]\n", "config": str(world["config"])},
        headers=auth,
    ).text
    assert "outside the folders" in text
    assert not world["marker"].exists()


def test_a_saved_copy_header_cannot_send_get_pages_outside(app: TestClient, world: dict[str, Path]) -> None:
    """A run's ``config.yaml`` reads its relative paths from the folder its first line names; the check
    read them from the copy's own folder, so a copy in the runs folder naming a folder elsewhere made
    GET /data and /tools import that folder's ``evil.py``."""
    auth = {"X-RLF-Token": TOKEN}
    copy = source_header(world["evil"].with_name("run.yaml")) + CONFIG + "local_plugins: [evil.py]\n"
    planted = world["runs"] / "planted.yaml"
    planted.write_text(copy)
    (world["runs"] / "copied").mkdir()
    (world["runs"] / "copied" / "config.yaml").write_text(copy)
    for path in (
        f"/data?config={planted}",
        f"/tools?config={planted}",
        "/tools?run=copied",
        "/data?config=copied/config.yaml",
    ):
        page = app.get(path, headers=auth)
        assert page.status_code == 403 and f"local_plugins[0]: {world['evil']} is outside the folders" in page.text, (
            path
        )
    assert not world["marker"].exists()


def test_validate_reads_relative_plugins_where_the_check_does(
    app: TestClient, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /config/validate checked a relative ``evil.py`` in the runs folder but loaded the text as a
    dict, which reads it from the UI's working folder: started from elsewhere, the UI imported it."""
    auth = {"X-RLF-Token": TOKEN}
    monkeypatch.chdir(world["evil"].parent)
    typed = app.post("/config/validate", data={"text": "local_plugins: [evil.py]\n"}, headers=auth).text
    assert f"no such file: {world['runs'] / 'evil.py'}" in typed  # looked for where a runs-folder file has it
    beside = app.post(
        "/config/validate", data={"text": "local_plugins: [evil.py]\n", "config": str(world["config"])}, headers=auth
    ).text
    assert f"no such file: {world['config'].with_name('evil.py')}" in beside
    headed = source_header(world["evil"].with_name("run.yaml")) + "local_plugins: [evil.py]\n"
    copied = app.post("/config/validate", data={"text": headed.replace("\n", "\r\n")}, headers=auth).text
    assert f"local_plugins[0]: {world['evil']} is outside the folders" in copied
    assert not world["marker"].exists()


def test_module_names_in_local_plugins_are_refused(
    app: TestClient, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``local_plugins: [name]`` imports ``name`` from wherever ``sys.path`` finds it (the working folder
    under ``python -m rlfcore``); the check let module names through unexamined."""
    auth = {"X-RLF-Token": TOKEN}
    name = "rlf_ui_access_evil"
    world["evil"].with_name(f"{name}.py").write_text(world["evil"].read_text())
    monkeypatch.syspath_prepend(str(world["evil"].parent))
    monkeypatch.delitem(sys.modules, name, raising=False)  # and dropped again if the test imports it
    for entry in (name, f"{name}:Plugin"):
        text = app.post("/config/validate", data={"text": f"local_plugins: ['{entry}']\n"}, headers=auth).text
        assert "(refused)" in text and "is a module name" in text, entry
    planted = world["runs"] / "modular.yaml"
    planted.write_text(CONFIG + f"local_plugins: [{name}]\n")
    for path in (f"/data?config={planted}", f"/tools?config={planted}"):
        page = app.get(path, headers=auth)
        assert page.status_code == 403 and f"local_plugins[0]: &#39;{name}&#39; is a module name" in page.text, path
    assert not world["marker"].exists()


def test_no_path_setting_can_be_overridden(app: TestClient, world: dict[str, Path]) -> None:
    """``sft.tools`` names a file (the tools' JSON schemas) inside the allowed ``sft`` section, so a launch
    could read one from anywhere; every path-typed setting of the core is refused, whatever its section."""
    for key in PATH_SETTINGS:
        assert not override_allowed(key) and not override_allowed(key + ".x"), key
    page = app.get(
        f"/data?config={world['config']}&overrides=sft.steps=1 sft.tools={world['secret']}",
        headers={"X-RLF-Token": TOKEN},
    )
    assert page.status_code == 403 and "not allowed from the UI: sft.tools" in page.text
    assert "sft.data, sft.tools" in page.text  # the message names what the allowed sections still refuse


def test_the_data_preview_reads_no_data_file_outside_the_served_folders(
    app: TestClient, world: dict[str, Path]
) -> None:
    rows = world["secret"].with_name("rows.jsonl")
    rows.write_text('{"id": "p", "prompt": "the user\'s private prompt", "ground_truth": "x"}\n')
    planted = world["runs"] / "elsewhere-data.yaml"
    planted.write_text(f"plugins: []\ndata:\n  eval: {rows}\n")
    page = app.get(f"/data?config={planted}", headers={"X-RLF-Token": TOKEN})
    assert page.status_code == 200 and f"data file {rows} is outside the folders this UI serves" in page.text
    assert "private prompt" not in page.text


def test_the_override_allow_list() -> None:
    for ok in ("trainer.steps", "trainer.lr", "rollout.sampling.temperature", "sft.steps", "seed", "model.dtype"):
        assert override_allowed(ok), ok
    for bad in (
        "local_plugins",
        "plugins",
        "mcp.servers.calc.command",
        "model.path",
        "data.train",
        "sft.data",
        "engine.base_url",
        "engine.name",
        "trainer.loggers",
        "envs.x",
        "rollout",  # a whole section could smuggle anything in a mapping
    ):
        assert not override_allowed(bad), bad
    assert check_overrides(["trainer.steps=3"]) == ["trainer.steps=3"]
    with pytest.raises(ValueError, match="model.path"):
        check_overrides(["trainer.steps=3", "model.path=/etc"])


def test_read_only_has_no_launch_stop_resume_or_tool_call(world: dict[str, Path]) -> None:
    app = create_app(world["runs"], world["config"], token=TOKEN, read_only=True)
    with TestClient(app, base_url=BASE, headers={"X-RLF-Token": TOKEN}) as c:
        for path in ("/launch", "/stop?run=x", "/resume?run=x", "/tools/call"):
            assert c.post(path, data={"config": str(world["config"])}).status_code in (404, 405), path
        data = c.get("/data").text
        assert "read-only" in data and 'hx-post="/launch"' not in data


def test_read_only_sets_up_no_plugin(world: dict[str, Path]) -> None:
    """``--read-only``: GET /tools and /data set the config's plugins up all the same, importing its local
    plugins (and starting their servers); now they show the config and say why the rest is left out."""
    marker = world["config"].with_name("own_imported")
    world["config"].with_name("own_tools.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    cfg = world["config"].with_name("with_plugin.yaml")
    cfg.write_text(CONFIG + "local_plugins: [own_tools.py]\n")
    app = create_app(world["runs"], world["config"], token=TOKEN, read_only=True)
    with TestClient(app, base_url=BASE, headers={"X-RLF-Token": TOKEN}) as c:
        tools = c.get(f"/tools?config={cfg}")
        assert (
            tools.status_code == 200
            and "sets up no plugins (no imports, no servers), so it lists no tools" in tools.text
        )
        assert f"rlf plugins list --config {cfg}" in tools.text
        data = c.get(f"/data?config={cfg}")
        assert data.status_code == 200 and "imports no local plugins" in data.text
        assert "local_plugins: [own_tools.py]" in data.text  # the config itself is shown
        validated = c.post("/config/validate", data={"text": cfg.read_text(), "config": str(cfg)}).text
        assert "(refused)" in validated and "imports no local plugins" in validated
        plain = c.get(f"/data?config={world['config']}").text
        assert "rendered (and counted) without tools" in plain and "&#34;hi&#34;" in plain  # rows still previewed
    assert not marker.exists()
    with TestClient(create_app(world["runs"], world["config"], token=TOKEN), base_url=BASE) as c:
        c.get(f"/tools?config={cfg}", headers={"X-RLF-Token": TOKEN})
    assert marker.exists()  # the same page of a UI that may launch does set the plugin up


def test_two_uis_on_one_host_keep_their_own_cookies() -> None:
    assert Secret("a" * 20).cookie != Secret("b" * 20).cookie
    with pytest.raises(ValueError, match="16 characters"):
        Secret("short")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_ui(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """``rlf ui`` as a user starts it; its first printed line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlfcore", "ui", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline()


def run_ui(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``rlf ui`` that is expected to exit at once."""
    return subprocess.run(
        [sys.executable, "-m", "rlfcore", "ui", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_rlf_ui_prints_the_bound_port_and_a_url_that_logs_in(world: dict[str, Path]) -> None:
    proc, line = start_ui([str(world["runs"]), "--port", "0"])
    try:
        found = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        assert found and found.group(1) != "0", line
        url = found.group(0)
        with httpx.Client(timeout=30, follow_redirects=True) as client:
            deadline = time.time() + 60
            while True:
                try:
                    answer = client.get(url)
                    break
                except httpx.TransportError:
                    assert time.time() < deadline and proc.poll() is None, line
                    time.sleep(0.2)
            assert answer.status_code == 200 and "rlf ui" in answer.text  # followed the login redirect
            assert client.get(url.split("?")[0] + "runs-table").status_code == 200  # by the cookie
            assert httpx.get(url.split("?")[0], timeout=30).status_code == 403  # a client without it
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_rlf_ui_on_a_busy_port_is_a_clear_error(world: dict[str, Path]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = run_ui([str(world["runs"]), "--port", str(port)])
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in out and "Traceback" not in out and "token=" not in out


def test_rlf_ui_refuses_a_short_token(world: dict[str, Path]) -> None:
    done = run_ui([str(world["runs"]), "--port", "0"], env={"RLF_UI_TOKEN": "short"})
    assert done.returncode == 2 and "16 characters" in done.stderr
