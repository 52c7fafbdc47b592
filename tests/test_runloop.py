"""One event loop per run: set-up, every GRPO step, scoring and shutdown see the same loop, and the
executor's concurrency limits hold across steps (a thread that overran its timeout in one step
still holds its slot in the next)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from rlfcore import ToolCall, tool
from rlfcore.runloop import RunLoop
from rlfcore.testing import make_runtime

LOOP_PLUGIN = """
import asyncio, os
from rlfcore import Score, hookimpl


def _note(what):
    with open(os.environ["LOOPS_FILE"], "a") as f:
        f.write(f"{what} {id(asyncio.get_running_loop())}\\n")


@hookimpl
def register_tools(ctx):
    _note("setup")
    return []


@hookimpl
async def compute_score(sample):
    _note("score")
    return Score(value=float(sample.response.startswith("A")))


@hookimpl
async def shutdown(ctx):
    _note("shutdown")
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "loops.py").write_text(LOOP_PLUGIN)
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"id": "r{i}", "prompt": "Say {i}."}}\n' for i in range(4)))
    (tmp_path / "run.yaml").write_text(
        """
local_plugins: [loops.py]
model:
  path: model
  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 16, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 32}
data: {train: rows.jsonl}
rollout: {n: 2, max_turns: 1, sampling: {max_tokens: 3}}
trainer: {steps: 2, prompts_per_step: 2, checkpoint_every: 10, samples_per_step: 0}
engine: {device: cpu}
"""
    )
    return tmp_path / "run.yaml"


@pytest.mark.slow
def test_a_training_run_sets_up_steps_scores_and_shuts_down_in_one_loop(tmp_path, monkeypatch):
    from rlfcore.backends.local.run import train
    from rlfcore.config import load_config
    from rlfcore.loop import Rollout

    monkeypatch.setenv("LOOPS_FILE", str(tmp_path / "loops.txt"))
    rollout = Rollout.run

    async def noted(self, rows):
        with (tmp_path / "loops.txt").open("a") as f:
            f.write(f"rollout {id(asyncio.get_running_loop())}\n")
        return await rollout(self, rows)

    monkeypatch.setattr(Rollout, "run", noted)
    config, manager = load_config(_project(tmp_path))
    summary = train(config, manager, tmp_path / "run")
    assert summary["steps"] == 2
    seen = [line.split() for line in (tmp_path / "loops.txt").read_text().splitlines()]
    phases = {what for what, _ in seen}
    assert phases == {"setup", "rollout", "score", "shutdown"}, phases
    assert sum(what == "rollout" for what, _ in seen) == 2  # one per step
    assert len({loop for _, loop in seen}) == 1, seen


def test_the_executor_keeps_its_limits_across_the_steps_of_a_run():
    """Step 1's call overruns its timeout; its thread still holds the tool's only slot when step 2
    starts, so step 2's call waits for it instead of running beside it."""
    running, most, calls = 0, 0, 0
    lock = threading.Lock()

    @tool(timeout_s=0.3, max_concurrency=1)
    def slow(x: int) -> int:
        """Slow the first time."""
        nonlocal running, most, calls
        with lock:
            running += 1
            calls += 1
            first = calls == 1
            most = max(most, running)
        time.sleep(0.5 if first else 0.01)
        with lock:
            running -= 1
        return x

    runtime = make_runtime({})
    try:
        executor = runtime.executor
        made = executor._global  # built with the executor, once for the run
        assert isinstance(made, asyncio.Semaphore)
        first = runtime.run(executor.run_one(ToolCall("slow", {"x": 1}), {"slow": slow}))
        second = runtime.run(executor.run_one(ToolCall("slow", {"x": 2}), {"slow": slow}))
    finally:
        runtime.close()
    assert first.error == "timeout"
    assert second.error is None and second.content == "2", second
    assert most == 1 and executor._global is made


def test_run_loop_runs_every_phase_in_one_loop_and_closes_what_is_left():
    loops = []

    async def phase() -> None:
        loops.append(asyncio.get_running_loop())

    async def forgotten() -> None:
        await asyncio.sleep(3600)

    with RunLoop() as runner:
        runner.run(phase())
        runner.run(phase())
        task = runner.loop.create_task(forgotten())
        runner.run(asyncio.sleep(0))
    assert loops[0] is loops[1] and loops[0].is_closed()
    assert task.cancelled()
    with pytest.raises(RuntimeError, match="closed"):
        runner.run(phase())


def test_run_loop_refuses_to_nest_and_a_created_runtime_refuses_another_loop():
    from rlfcore.config import RunConfig
    from rlfcore.plugins import PluginManager
    from rlfcore.runtime import Runtime

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="inside a running event loop"):
            RunLoop().run(asyncio.sleep(0))

    asyncio.run(inside())
    manager = PluginManager()
    manager.discover()
    runtime = asyncio.run(Runtime.create(RunConfig(), manager))
    with pytest.raises(RuntimeError, match="set up in another event loop"):
        runtime.run(asyncio.sleep(0))


def test_a_signal_raised_in_one_task_ends_its_phase_once_and_the_next_phases_run():
    """A plain ``def`` hook runs in a task's step: the signal's exception leaves the loop there, and
    every task that awaited that one raises it again later, while the tasks that finished leave their
    ``loop.stop()`` queued. Neither may end the next phase (the checkpoint, the close)."""
    import signal

    from rlfcore.runloop import RunLoop
    from rlfcore.signals import Interrupted

    async def hook() -> None:
        raise Interrupted(signal.SIGTERM)  # what signals._raise does inside a sync hook

    async def step() -> None:
        interrupted = asyncio.ensure_future(hook())

        async def scorer() -> None:  # awaits the interrupted task: raises its exception again
            await interrupted

        await asyncio.gather(scorer(), scorer(), asyncio.sleep(0))

    loop = RunLoop(timeout_s=5)
    with pytest.raises(Interrupted) as first:
        loop.run(step())
    assert loop.run(asyncio.sleep(0.01, result="saved")) == "saved"  # the checkpoint after the signal
    loop.close()  # and the close, while the awaiting tasks re-raise the same exception
    assert first.value.signum == signal.SIGTERM

    again = RunLoop(timeout_s=5)  # a new signal is a new exception: it ends its phase too
    with pytest.raises(Interrupted):
        again.run(step())
    with pytest.raises(Interrupted):
        again.run(step())
    again.close()
