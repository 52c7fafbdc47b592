"""SIGTERM and SIGINT: ``rlf eval`` and ``rlf train`` stop cleanly, leave no process behind, exit
130/143, and a training run keeps its last finished step as a checkpoint it says how to resume from.

The MCP server here is a real stdio server (the MCP SDK's); a tool call is in flight when the signal
arrives. The model is a tiny Qwen3 built here (no hub); the eval's turns are scripted by a local
engine plugin so the call is certain to be made.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfcore.signals import Interrupted, deferred, handled, interruption
from tests.support import ROOT
from tests.support.samples import TINY_SIZES

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)")

WAITER = """
import asyncio, os, sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("waiter", log_level="CRITICAL")


@server.tool(description="Write this server's pid to a file, then wait ten minutes.")
async def wait(marker: str) -> str:
    with open(marker + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)
    await asyncio.sleep(600)
    return "done"


server.run("stdio")
"""

ENGINE_PLUGIN = """
import json, os
from rlfcore import hookimpl
from rlfcore.engines.scripted import ScriptedEngine

CALL = "<tool_call>" + json.dumps({"name": "wait", "arguments": {"marker": os.environ["WAITER_MARKER"]}}) + "</tool_call>"


@hookimpl
def register_engines(ctx):
    return {"script": lambda config, tokenizer: ScriptedEngine(tokenizer, lambda request_id, prompt: CALL)}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    texts = ['<tool_call>{"name": "wait", "arguments": {"marker": "m"}}</tool_call> done'] * 10
    return build_tiny(texts, tmp_path_factory.mktemp("tiny") / "model", vocab_size=300)


def _start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    full_env.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "rlfcore", *args],
        cwd=cwd,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for(check, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"rlf exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_rlf_eval_stops_its_mcp_server_with_a_call_in_flight(tiny, tmp_path, signum, code):
    (tmp_path / "waiter.py").write_text(WAITER)
    (tmp_path / "script_engine.py").write_text(ENGINE_PLUGIN)
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "q", "prompt": "Wait."}) + "\n")
    (tmp_path / "run.yaml").write_text(
        f"plugins: [mcp]\nlocal_plugins: [script_engine.py]\nmodel:\n  path: {tiny}\ndata:\n  eval: data.jsonl\n  default_env: mcp\n"
        f"engine:\n  name: script\ntools:\n  timeout_s: 600\n"
        f"mcp:\n  servers:\n    waiter:\n      command: {sys.executable}\n      args: [waiter.py]\n"
    )
    marker = tmp_path / "called"
    proc = _start(["eval", "run.yaml", "--out", "out.jsonl"], tmp_path, {"WAITER_MARKER": str(marker)})
    _wait_for(marker.exists, 240, "the MCP tool call", proc)
    server = int(marker.read_text())
    helpers = [p for p in _children(proc.pid) if p != server]  # forkserver, scoring workers, if any
    assert _alive(server)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("rlf eval did not exit within 60 s of the signal")
    assert proc.returncode == code, out + err
    assert f"Aborted ({signal.Signals(signum).name})" in err
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in [server, *helpers]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server), "the MCP server outlived rlf eval"
    assert not [p for p in helpers if _alive(p)], "a child process outlived rlf eval"


def test_a_signal_inside_deferred_waits_for_the_block_and_then_raises():
    steps = []
    with pytest.raises(Interrupted) as caught, handled():
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler has run by now: the block goes on
            steps.append("finished")
        steps.append("not reached")
    assert steps == ["finished"]
    assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is not None and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN


def test_handlers_are_restored_and_interruption_finds_a_wrapped_signal():
    before = signal.getsignal(signal.SIGTERM)
    with handled():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    try:
        try:
            raise Interrupted(signal.SIGINT, note="saved")
        except KeyboardInterrupt as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        found = interruption(wrapped)
    assert found is not None and found.note == "saved" and found.exit_code == 130


TRAIN_PLUGIN = """
from rlfcore import Score, hookimpl


@hookimpl
def compute_score(sample):
    return Score(value=float(sample.response.startswith("A")))
"""


def _train_project(tmp_path: Path) -> Path:
    (tmp_path / "plugin.py").write_text(TRAIN_PLUGIN)
    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(8)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text(
        "plugins: [mcp]\nlocal_plugins: [plugin.py]\nseed: 3\nmodel:\n  path: model\n"
        "  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
        "data: {train: rows.jsonl, default_env: plugin}\nrollout: {n: 4, max_turns: 1, sampling: {max_tokens: 6, temperature: 1.0}}\n"
        "trainer: {steps: 1000, prompts_per_step: 2, lr: 0.01, checkpoint_every: 1000, samples_per_step: 1}\nengine: {device: cpu}\n"
    )
    return tmp_path / "run.yaml"


def _steps(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sigint_in_rlf_train_saves_the_last_step_and_resume_matches_an_uninterrupted_run(tmp_path):
    from tests.support.rlf import run_rlf

    config = _train_project(tmp_path)
    run = tmp_path / "part"
    proc = _start(["train", str(config), "--run-dir", str(run)], tmp_path)
    metrics = run / "metrics.jsonl"
    _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, 240, "two training steps", proc)
    children = _children(proc.pid)
    assert children  # the bundled MCP calculator server at least
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("rlf train did not exit within 60 s of SIGINT")
    assert proc.returncode == 130, out + err
    done = len(_steps(run))
    assert done >= 2 and [m["step"] for m in _steps(run)] == list(range(1, done + 1))
    checkpoint = run / "checkpoints" / f"step_{done:06d}"
    assert (checkpoint / "trainer.pt").exists() and (checkpoint / "model" / "model.safetensors").exists()
    assert f"step {done} saved in {checkpoint}" in err and f"--resume (it starts at step {done + 1})" in err, err
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in children if _alive(p)], "a child process (the MCP server) outlived rlf train"

    resumed = run_rlf(
        "train", str(config), f"trainer.steps={done + 1}", "--run-dir", str(run), "--resume", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    full = run_rlf("train", str(config), f"trainer.steps={done + 1}", "--run-dir", str(tmp_path / "full"), cwd=tmp_path)
    assert full.returncode == 0, full.stdout + full.stderr
    again, straight = _steps(run), _steps(tmp_path / "full")
    assert [m["step"] for m in again] == [m["step"] for m in straight] == list(range(1, done + 2))
    for a, b in zip(again, straight):
        for key in ("reward_mean", "loss", "grad_norm", "response_length", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)


@pytest.fixture
def trainer(tmp_path):
    """A LocalTrainer of a tiny model built here, on two rows, with the built-in reward."""
    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import ensure_model, load_policy
    from rlfcore.backends.local.rundir import RunDir
    from rlfcore.data import normalize_row
    from rlfcore.testing import make_runtime

    rows = [{"id": f"r{i}", "prompt": f"Say {i}."} for i in range(2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model": {
            "path": "model",
            "init": {"texts": ["rows.jsonl"], **TINY_SIZES},
        },
        "rollout": {"n": 2, "max_turns": 1, "sampling": {"max_tokens": 4}},
        "trainer": {"steps": 3, "prompts_per_step": 2, "checkpoint_every": 10, "samples_per_step": 0},
        "engine": {"device": "cpu"},
    }
    runtime = make_runtime(config)
    model, hf_tok = load_policy(ensure_model(runtime.config, tmp_path), "cpu")
    yield LocalTrainer(
        runtime, model, hf_tok, [normalize_row(r, i) for i, r in enumerate(rows)], RunDir(tmp_path / "run")
    )


def test_a_signal_while_a_step_is_applied_waits_and_that_step_is_saved(trainer):
    def signal_during_step(metrics):
        if metrics["step"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)

    with pytest.raises(Interrupted) as caught, handled():
        trainer.run(signal_during_step)
    assert caught.value.signum == signal.SIGTERM and trainer.step == 1
    assert "step 1 saved in" in caught.value.note and "it starts at step 2" in caught.value.note
    assert trainer.run_dir.last_checkpoint().name == "step_000001"
    assert [json.loads(x)["step"] for x in (trainer.run_dir.path / "metrics.jsonl").read_text().splitlines()] == [1]


def test_ctrl_c_without_the_handlers_inside_a_step_saves_nothing_half_applied(trainer):
    def interrupt(_metrics):
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as caught:
        trainer.run(interrupt)
    assert "nothing saved" in caught.value.note and trainer.run_dir.last_checkpoint() is None
