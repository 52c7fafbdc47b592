"""What an agent program costs through rlf's OpenAI-compatible endpoint, against rlf's own loop.

One workload for both: each episode is a calculator question; turn 1 the model writes a hermes
``<tool_call>`` for ``add``, the tool's result comes back, turn 2 the model answers with the sum
(row ``i`` adds ``i`` and 3). The model is a :class:`~rlfcore.engines.scripted.ScriptedEngine` with
the byte tokenizer, so everything measured is framework:

- ``rlf loop``: the real :class:`~rlfcore.loop.Rollout` with a plugin registering a sync ``add`` tool
  (``rlfcore.tools.tool``), the built-in executor and hermes parser.
- ``gateway``: :class:`~rlfcore.agents.rollout.AgentRollout` with ``agent.entry`` naming
  :func:`calculator_agent` below, a hand-written OpenAI SDK tool loop (``openai.AsyncOpenAI``) that
  sends the same two turns over HTTP to the endpoint (uvicorn and starlette on loopback) and runs
  ``add`` itself. The SDK client and the server run in this process, so its CPU is theirs together.

Measured, each after a warm-up run of both (imports, template compilation, first calls):

- ``framework CPU``: zero-latency generation and tools, every episode at once: process CPU time (all
  threads) per turn, and the gateway's against the loop's (goal: at most 1.5x).
- ``rlf's side of the gateway``: the same episodes with the agents' SDK clients on an event loop of
  their own in another thread (:func:`client_side_agent`), as when agents run elsewhere: the CPU
  time of the run's own thread (endpoint, episode records, engine, the per-episode client rlf hands
  over) per turn, against the loop's process CPU per turn. Then the same with the agents in a
  process of their own (:func:`process_side_agent`): no agent holds the run thread's interpreter
  lock, so the figure is the endpoint's alone, as with ``agent.command`` or remote agents.
- ``throughput``: episodes per second with ``--gen-latency`` per generate call, every episode at
  once (``rollout.concurrency`` = ``--episodes``, one episode per row), the endpoint's start and stop
  included as in a rollout step.

Run: ``python benchmarks/agent_gateway.py [--episodes 256] [--gen-latency 0]``.
Prints a table and writes JSON to ``benchmarks/results/agent_gateway.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import openai

from rlfcore import hookimpl
from rlfcore.agents.rollout import AgentRollout
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import Row, normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout, Trajectory
from rlfcore.testing import make_runtime
from rlfcore.tools import tool
from rlfcore.types import Tool

TARGET_GATEWAY_OVER_LOOP = 1.5
TURNS = 2
DEFAULT_OUT = Path(__file__).parent / "results" / "agent_gateway.json"
_TLS = ssl.create_default_context()


def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


ADD = tool(add).schema()
"""The schema the agent sends: the one rlf's loop renders for its own ``add`` tool, so both prompts match."""


class CalculatorTools:
    """The loop's plugin: the ``add`` tool, sync, as a plugin author writes one."""

    @hookimpl
    def register_tools(self) -> list[Tool]:
        return [tool(add)]


async def calculator_agent(task: dict[str, Any], client: Any) -> str | None:
    """The benchmark's ``agent.entry``: the OpenAI SDK tool loop a user writes, tools run by the agent."""
    messages: list[Any] = list(task["messages"])
    for _ in range(4):
        reply = await client.chat.completions.create(model="policy", messages=messages, tools=[ADD])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            result = add(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


@functools.cache
def _clients() -> asyncio.AbstractEventLoop:
    """The agents' own event loop, in a (daemon) thread of its own, for :func:`client_side_agent`;
    made in the module ``agent.entry`` loads, which is not this script's ``__main__``."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return loop


async def client_side_agent(task: dict[str, Any], client: Any) -> str | None:
    """:func:`calculator_agent` run on the agents' loop, with a client of its own there: its CPU is
    not the run thread's."""
    url, key = str(client.base_url), client.api_key
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_elsewhere(task, url, key), _clients()))


async def _elsewhere(task: dict[str, Any], url: str, key: str) -> str | None:
    http = openai.DefaultAsyncHttpxClient(verify=_TLS)
    async with openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, http_client=http) as client:
        return await calculator_agent(task, client)


@functools.cache
def _agents_process() -> tuple[subprocess.Popen[bytes], dict[str, asyncio.Future[str | None]]]:
    """The process that runs the agents for :func:`process_side_agent` (this script with
    ``--agents-process``), and a thread here that hands each answer to its episode's future."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--agents-process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    waiting: dict[str, asyncio.Future[str | None]] = {}

    def answers(out: IO[bytes]) -> None:
        for line in out:
            reply = json.loads(line)
            future = waiting.pop(reply["key"])
            future.get_loop().call_soon_threadsafe(future.set_result, reply["answer"])

    threading.Thread(target=answers, args=(proc.stdout,), daemon=True).start()
    return proc, waiting


async def process_side_agent(task: dict[str, Any], client: Any) -> str | None:
    """:func:`calculator_agent` run in another process, which gets the episode's URL and key."""
    proc, waiting = _agents_process()
    key = client.api_key
    waiting[key] = asyncio.get_running_loop().create_future()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"task": task, "url": str(client.base_url), "key": key}).encode() + b"\n")
    proc.stdin.flush()
    return await waiting[key]


def serve_agents() -> None:
    """``--agents-process``: one episode's agent per line of stdin (its task, URL and key), each
    answer a line of stdout; one shared client (connection pool) for the endpoint's URL."""
    loop = asyncio.new_event_loop()
    clients: dict[str, Any] = {}

    async def one(episode: dict[str, Any]) -> None:
        url, key = episode["url"], episode["key"]
        if url not in clients:
            http = openai.DefaultAsyncHttpxClient(verify=_TLS)
            clients[url] = openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, http_client=http)
        try:
            answer = await calculator_agent(episode["task"], clients[url].with_options(api_key=key))
        except Exception as exc:  # the episode's check names it
            answer = f"{type(exc).__name__}: {exc}"
        sys.stdout.write(json.dumps({"key": key, "answer": answer}) + "\n")
        sys.stdout.flush()

    def read() -> None:
        for line in sys.stdin:
            asyncio.run_coroutine_threadsafe(one(json.loads(line)), loop)
        loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=read, daemon=True).start()
    loop.run_forever()


def workload(episodes: int) -> tuple[list[Row], dict[str, list[str]], dict[str, str]]:
    """The rows, each row's two scripted turns and its expected answer."""
    rows, scripts, answers = [], {}, {}
    for i in range(episodes):
        row_id = f"q{i}"
        call = json.dumps({"name": "add", "arguments": {"a": i, "b": 3}})
        scripts[row_id] = [f"<tool_call>\n{call}\n</tool_call>", str(i + 3)]
        answers[row_id] = str(i + 3)
        rows.append(normalize_row({"id": row_id, "prompt": f"What is {i}+3? Use the add tool."}, i))
    return rows, scripts, answers


def _config(episodes: int, scripts: dict[str, list[str]]) -> dict[str, Any]:
    longest = max(len(text.encode()) for script in scripts.values() for text in script)
    return {
        "rollout": {
            "n": 1,
            "max_turns": TURNS,
            "concurrency": episodes,
            "max_response_tokens": 1 << 20,
            "max_total_tokens": 1 << 20,
            "sampling": {"max_tokens": longest + 16},
        },
        "tools": {"max_concurrency": episodes},
    }


def _check(done: list[Trajectory], answers: dict[str, str], answer_of: Any, what: str) -> None:
    """Raise unless every episode ran as scripted: two turns, one call, the right sum, the template's tokens."""
    bad = [
        t
        for t in done
        if t.stop_reason != "answer"
        or t.error
        or t.tool_errors
        or t.num_turns != TURNS
        or t.tool_calls != 1
        or t.template_mismatch
        or answer_of(t) != answers[t.row_id]
    ]
    if bad:
        t = bad[0]
        raise RuntimeError(
            f"{what}: {len(bad)} of {len(done)} episodes did not run as scripted, e.g. {t.id}: "
            f"stop_reason={t.stop_reason}, turns={t.num_turns}, calls={t.tool_calls}, answer={answer_of(t)!r}, "
            f"tool errors={t.tool_error_kinds}, error={t.error}, template mismatch={t.template_mismatch}"
        )


def _figures(done: list[Trajectory], wall: float, cpu: float, gen_latency: float) -> dict[str, Any]:
    turns = sum(t.num_turns for t in done)
    return {
        "episodes": len(done),
        "turns": turns,
        "gen_latency_s": gen_latency,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_per_turn_s": cpu / turns,
        "episodes_per_s": len(done) / wall,
    }


def rlf_loop(episodes: int, gen_latency: float) -> dict[str, Any]:
    """Wall and process CPU time of rlf's loop over the workload; raises if an episode went wrong."""
    rows, scripts, answers = workload(episodes)
    config = {"plugins": ["calculator"], **_config(episodes, scripts)}
    runtime = make_runtime(config, {"calculator": CalculatorTools()})
    try:
        tokenizer = ByteChatTokenizer()
        loop = Rollout(runtime, ScriptedEngine(tokenizer, scripts, latency_s=gen_latency), tokenizer)
        cpu, wall = time.process_time(), time.perf_counter()
        done = runtime.run(loop.run(rows, n=1))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        runtime.close()
    _check(done, answers, lambda t: str(t.messages[-1].get("content") or "").strip(), "rlf loop")
    return _figures(done, wall, cpu, gen_latency)


def gateway(episodes: int, gen_latency: float) -> dict[str, Any]:
    """Wall and process CPU time of the agent rollout over the workload (the SDK client, the endpoint
    and the episodes' records, all in this process); raises if an episode went wrong."""
    rows, scripts, answers = workload(episodes)
    config = {**_config(episodes, scripts), "agent": {"entry": f"{Path(__file__).resolve()}:calculator_agent"}}
    runtime = make_runtime(config, {})
    try:
        tokenizer = ByteChatTokenizer()
        agents = AgentRollout(runtime, ScriptedEngine(tokenizer, scripts, latency_s=gen_latency), tokenizer)
        cpu, wall = time.process_time(), time.perf_counter()
        done = runtime.run(agents.run(rows, n=1))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        runtime.close()
    _check(done, answers, lambda t: t.answer, "gateway")
    return _figures(done, wall, cpu, gen_latency)


def gateway_side(episodes: int, entry: str = "client_side_agent") -> dict[str, Any]:
    """The run thread's CPU time over the workload with the agents elsewhere: their clients on
    another thread (``client_side_agent``) or in another process (``process_side_agent``)."""
    rows, scripts, answers = workload(episodes)
    agent = {"entry": f"{Path(__file__).resolve()}:{entry}"}
    runtime = make_runtime({**_config(episodes, scripts), "agent": agent}, {})
    try:
        tokenizer = ByteChatTokenizer()
        agents = AgentRollout(runtime, ScriptedEngine(tokenizer, scripts), tokenizer)

        async def measured() -> tuple[list[Trajectory], float]:
            cpu = time.thread_time()
            done = await agents.run(rows, n=1)
            return done, time.thread_time() - cpu

        wall = time.perf_counter()
        done, cpu = runtime.run(measured())
        wall = time.perf_counter() - wall
    finally:
        runtime.close()
    _check(done, answers, lambda t: t.answer, "gateway side")
    return _figures(done, wall, cpu, 0.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    rlf_loop(2, 0.0)  # warm-up of both: imports, template compilation, first calls are paid once per process
    gateway(2, 0.0)
    loop_cpu = rlf_loop(args.episodes, 0.0)
    gateway_cpu = gateway(args.episodes, 0.0)
    side_cpu = gateway_side(args.episodes)
    process_side_cpu = gateway_side(args.episodes, "process_side_agent")
    loop_rate = rlf_loop(args.episodes, args.gen_latency)
    gateway_rate = gateway(args.episodes, args.gen_latency)
    return {
        "config": {
            "episodes": args.episodes,
            "concurrency": args.episodes,
            "turns_per_episode": TURNS,
            "tool_calls_per_episode": 1,
            "gen_latency_s": args.gen_latency,
            "engine": "scripted",
            "tokenizer": "byte",
        },
        "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
        "rlf_loop": {"framework_cpu": loop_cpu, "throughput": loop_rate},
        "gateway": {"framework_cpu": gateway_cpu, "throughput": gateway_rate},
        "gateway_side": {"run_thread_cpu": side_cpu},
        "gateway_side_process": {"run_thread_cpu": process_side_cpu},
        "ratios": {
            "gateway_over_loop_cpu_per_turn": gateway_cpu["cpu_per_turn_s"] / loop_cpu["cpu_per_turn_s"],
            "gateway_over_loop_cpu_per_turn_goal": TARGET_GATEWAY_OVER_LOOP,
            "gateway_over_loop_episodes_per_s": gateway_rate["episodes_per_s"] / loop_rate["episodes_per_s"],
            "gateway_side_over_loop_cpu_per_turn": side_cpu["cpu_per_turn_s"] / loop_cpu["cpu_per_turn_s"],
            "gateway_side_process_over_loop_cpu_per_turn": process_side_cpu["cpu_per_turn_s"]
            / loop_cpu["cpu_per_turn_s"],
        },
    }


def table(result: dict[str, Any]) -> str:
    c, r, load = result["config"], result["ratios"], result["load_average"]
    lines = [
        f"{c['episodes']} episodes at once x {c['turns_per_episode']} turns ({c['tool_calls_per_episode']} add call, "
        f"then the answer), scripted engine, byte tokenizer; load average {load['before']:.2f} -> {load['after']:.2f}",
        "",
        f"{'':<44}{'CPU/turn':>11}{'wall':>10}{'episodes/s':>12}{'wall':>10}{'episodes/s':>12}",
        f"{'':<44}{'(zero latency)':>33}{'(generation ' + format(c['gen_latency_s'] * 1000, 'g') + ' ms)':>34}",
    ]
    for name, key in (
        ("rlf loop (Rollout, sync plugin tool)", "rlf_loop"),
        ("gateway (AgentRollout, OpenAI SDK agent)", "gateway"),
    ):
        cpu, rate = result[key]["framework_cpu"], result[key]["throughput"]
        lines.append(
            f"{name:<44}{cpu['cpu_per_turn_s'] * 1e3:>8.3f} ms{cpu['wall_s']:>8.3f} s{cpu['episodes_per_s']:>12.1f}"
            f"{rate['wall_s']:>8.3f} s{rate['episodes_per_s']:>12.1f}"
        )
    for name, key in (
        ("rlf side of the gateway (run thread only)", "gateway_side"),
        ("  the same, agents in another process", "gateway_side_process"),
    ):
        side = result[key]["run_thread_cpu"]
        lines.append(
            f"{name:<44}{side['cpu_per_turn_s'] * 1e3:>8.3f} ms{side['wall_s']:>8.3f} s{side['episodes_per_s']:>12.1f}"
        )
    ratio, goal = r["gateway_over_loop_cpu_per_turn"], r["gateway_over_loop_cpu_per_turn_goal"]
    verdict = "within" if ratio <= goal else "OVER"
    lines += [
        "  (the gateway's CPU includes the OpenAI SDK client and uvicorn (the endpoint a bare ASGI app, not",
        "   uvicorn/starlette), all in this process; its wall includes the endpoint's start and stop, as in a",
        "   rollout step, and the agents' process start in the last row's)",
        "",
        f"gateway / loop CPU per turn = {ratio:.2f}x ({verdict} the goal of <= {goal}x); "
        f"episodes/s gateway / loop = {r['gateway_over_loop_episodes_per_s']:.2f}",
        f"rlf's side of the gateway / loop CPU per turn = {r['gateway_side_over_loop_cpu_per_turn']:.2f}x "
        "(the agents' clients on a thread of their own, as when agents run elsewhere), "
        f"{r['gateway_side_process_over_loop_cpu_per_turn']:.2f}x with the agents in another process",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    if (argv if argv is not None else sys.argv[1:]) == ["--agents-process"]:
        return serve_agents()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=256, help="episodes (rows, n=1), all at once")
    parser.add_argument("--gen-latency", type=float, default=0.0, help="seconds per generate call (throughput)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.gen_latency < 0:
        parser.error("need --episodes >= 1 and --gen-latency >= 0")
    result = run(args)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
