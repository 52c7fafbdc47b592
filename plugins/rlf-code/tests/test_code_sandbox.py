"""The interpreter as the model uses it: state kept between calls, output, errors, limits, the pool."""

from __future__ import annotations

import os
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


def test_warm_pool_calls_take_milliseconds(pool: Pool) -> None:
    time.sleep(0.5)  # let the pool fill
    session = Session(pool)
    session.call("1")  # the first call takes a started sandbox
    latencies = sorted(session.call("1 + 1").latency_s for _ in range(50))
    session.close()
    assert latencies[25] < 0.02, f"median call {latencies[25] * 1000:.1f} ms"


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
