"""The interpreter as the model uses it: state kept between calls, output, errors, limits, the pool."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from code_sandbox_support import SMALL, layers, pool, sandbox  # noqa: F401 (fixtures)
from rlf_code.layers import Layers
from rlf_code.pool import Pool, Session
from rlf_code.sandbox import Sandbox, processes_of


def test_state_persists_like_a_notebook(sandbox: Sandbox) -> None:
    assert sandbox.call("import math\nx = 40").ok
    assert sandbox.call("with open('notes.txt', 'w') as f: f.write('kept')").ok
    out = sandbox.call("print('hi'); x + round(math.sqrt(4))")
    assert (out.stdout, out.result, out.error) == ("hi\n", "42", None)
    assert sandbox.call("open('notes.txt').read()").result == "'kept'"


def test_errors_show_the_models_code_not_the_kernel(sandbox: Sandbox) -> None:
    out = sandbox.call("def f():\n    return 1 / 0\nf()")
    assert out.error is not None and out.error.endswith("ZeroDivisionError: division by zero\n")
    assert '<cell 1>", line 2, in f' in out.error and "kernel.py" not in out.error
    assert sandbox.call("x = 1").ok  # the interpreter goes on


def test_subprocess_output_and_stderr_are_captured(sandbox: Sandbox) -> None:
    out = sandbox.call("import os, sys; os.system('echo from-shell'); print('oops', file=sys.stderr)")
    assert out.stdout == "from-shell\n" and out.stderr == "oops\n"
    assert (
        sandbox.call("echo $((6 * 7)); exit 3", mode="bash").render()
        == "[stdout]\n42\n[error]\nbash exited with status 3"
    )


def test_long_output_is_cut_with_a_marker(sandbox: Sandbox) -> None:
    out = sandbox.call("print('y' * 100_000)")
    assert out.stdout.startswith("y" * SMALL.max_output_bytes)
    assert out.stdout.endswith(f"[... {100_001 - SMALL.max_output_bytes} more bytes cut]")


def test_a_long_result_and_error_are_cut_with_the_same_marker(sandbox: Sandbox) -> None:
    out = sandbox.call("'a' * 100_000")
    assert (
        out.result
        == "'" + "a" * (SMALL.max_output_bytes - 1) + f"\n[... {100_002 - SMALL.max_output_bytes} more bytes cut]"
    )
    error = sandbox.call("raise ValueError('e' * 100_000)").error or ""
    cut = re.fullmatch(r"\[\.\.\. (\d+) more bytes cut\]\n(.*)", error, re.DOTALL)  # the end of a traceback is kept
    assert cut is not None and len(cut[2]) == SMALL.max_output_bytes and cut[2].endswith("e" * 1000 + "\n")
    assert int(cut[1]) > 100_000 - SMALL.max_output_bytes


def test_output_that_escapes_past_the_message_limit_is_cut_and_the_state_kept(sandbox: Sandbox) -> None:
    """Control characters take 6 bytes in JSON and emoji 12: the answer is cut to fit its frame."""
    assert sandbox.call("x = 41").ok
    out = sandbox.call("import sys\nprint('\\x01' * 8192)\nprint('\\x01' * 8192, file=sys.stderr)\n'\U0001f600' * 8192")
    assert out.failure is None and out.error is None
    for text in (out.stdout, out.stderr, out.result):
        assert re.search(r"\n\[\.\.\. \d+ more bytes cut\]$", text or "")
    assert out.stdout.startswith("\x01" * 1000) and (out.result or "").startswith("'" + "\U0001f600" * 1000)
    assert sandbox.call("x + 1").result == "42"


def test_environment_is_scrubbed(sandbox: Sandbox) -> None:
    os.environ["RLF_CODE_SECRET"] = "hunter2"
    try:
        fresh = Sandbox(SMALL, sandbox.layers).start()
        env = fresh.call("import os; sorted(os.environ)").result
        fresh.close()
    finally:
        del os.environ["RLF_CODE_SECRET"]
    assert env is not None and "RLF_CODE_SECRET" not in env
    assert set(eval(env)) <= {"PATH", "HOME", "LANG", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MPLBACKEND"}


def test_a_call_past_its_time_is_stopped_and_the_next_gets_a_fresh_interpreter(pool: Pool) -> None:
    session = Session(pool)
    assert session.call("x = 1").ok
    began = time.monotonic()
    out = session.call("while True: pass")
    assert out.failure == "timeout" and "past its 3 s limit" in (out.error or "")
    assert time.monotonic() - began < SMALL.call_timeout_s + 2
    after = session.call("'x' in dir()")
    assert after.result == "False" and "new interpreter" in after.stderr
    assert session.restarts == 1 and session.failures == ["timeout"]
    session.close()


def test_a_session_takes_a_sandbox_the_pool_started_ahead(pool: Pool) -> None:
    """The first call of a trajectory starts no interpreter: it gets one the pool started before it
    (how fast a call then is lives in benchmarks/call_latency.py, not in a timed test)."""
    deadline = time.monotonic() + 20
    while not pool._ready and time.monotonic() < deadline:
        time.sleep(0.05)
    ready = list(pool._ready)
    assert ready, "the pool started no sandbox ahead in 20 s"
    session = Session(pool)
    assert session.call("1 + 1").result == "2"
    assert session._sandbox in ready
    session.close()


def test_close_leaves_no_process_and_no_file(layers: Layers) -> None:
    box = Sandbox(SMALL, layers).start()
    box.call("import subprocess; subprocess.Popen(['sleep', '60']); open('f', 'w').write('x')")
    uid, workdir = box.uid, box._host_workdir
    box.close()
    if uid is not None:
        assert processes_of(uid) == []
    if layers.cgroups:
        assert not any(Path(f"/sys/fs/cgroup/{c}/rlf-code/{uid}").exists() for c in ("memory", "pids"))
    if workdir is not None:
        assert not Path(workdir).exists()
    assert not box.alive and box.call("1").failure == "crash"


def test_a_pooled_sandbox_that_died_waiting_is_released_and_replaced(pool: Pool) -> None:
    deadline = time.monotonic() + 20
    while not pool._ready and time.monotonic() < deadline:
        time.sleep(0.05)
    dead = pool._ready[-1]
    os.killpg(dead._proc.pid, 9)  # type: ignore[union-attr]
    dead._proc.wait()  # type: ignore[union-attr]
    taken = pool.take()
    assert taken is not dead and taken.alive and taken.call("1").result == "1"
    assert dead._lease is None and dead._proc is None  # closed: its uid and cgroups are free again
    taken.close()
