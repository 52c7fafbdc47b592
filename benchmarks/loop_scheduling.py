"""How close rlf's rollout loop comes to the best possible schedule when tool latencies are heavy-tailed.

Every trajectory makes ``--turns`` generate calls: each turn but the last issues ``--calls`` tool calls,
the last answers. Generation takes a fixed time (``--gen-latency``); each tool call sleeps for a latency
drawn once per (trajectory, turn, call) from a seeded lognormal (median 20 ms, p99 1 s), so every
policy below sees the same latencies:

- ``rlf loop``: the real :class:`~rlfcore.loop.Rollout` with a plugin registering a sync ``sleep`` tool,
  the built-in executor, a :class:`~rlfcore.engines.scripted.ScriptedEngine` and the byte tokenizer.
  ``rollout.concurrency`` = trajectories and ``tools.max_concurrency`` = trajectories × calls, so
  neither limit ever makes a call wait: the loop's own scheduling is what is measured. Measured again
  with an async ``sleep`` tool, which the executor awaits instead of running in a thread.
- ``ideal bound``: each trajectory needs at least the sum over turns of the generation latency and its
  slowest call that turn; the bound is the maximum over trajectories.
- ``batch-synchronous`` (RL-Factory's scheduling): each turn one batched generate for all trajectories,
  modelled as a single generation latency for the whole batch, then every call of the batch on a
  ThreadPoolExecutor(32), waiting for the last before the next turn.
- ``framework CPU``: the rlf loop again with zero-latency generation and tools: process CPU time
  (all threads) per tool call and per turn, i.e. what the framework itself costs.

Run: ``python benchmarks/loop_scheduling.py [--trajectories 256 --turns 4 --calls 2 --gen-latency 0.05]``.
Prints a table and writes JSON to ``benchmarks/results/loop_scheduling.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import random
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from rlfcore import hookimpl
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.testing import make_runtime
from rlfcore.tools import tool

TOOL_MEDIAN_S = 0.020
TOOL_P99_S = 1.0
BATCH_SYNC_THREADS = 32
TARGET_RLF_OVER_IDEAL = 1.15
TARGET_SCALE_OVER_IDEAL = 1.06
DEFAULT_OUT = Path(__file__).parent / "results" / "loop_scheduling.json"

Latencies = list[list[list[float]]]
"""``latencies[trajectory][turn][call]`` in seconds, for the turns that call tools."""


class SleepTools:
    """The benchmark's plugin: one tool, sync (run in a thread) or async, that sleeps as long as asked."""

    def __init__(self, use_async: bool):
        self.use_async = use_async

    @hookimpl
    def register_tools(self) -> list[Any]:
        @tool(name="sleep")
        def sync_sleep(seconds: float) -> str:
            """Wait ``seconds``, like a call to a slow service."""
            time.sleep(seconds)
            return "ok"

        @tool(name="sleep")
        async def async_sleep(seconds: float) -> str:
            """Wait ``seconds``, like a call to a slow service."""
            await asyncio.sleep(seconds)
            return "ok"

        return [async_sleep if self.use_async else sync_sleep]


def draw_latencies(trajectories: int, turns: int, calls: int, seed: int, median_s: float = TOOL_MEDIAN_S) -> Latencies:
    """Lognormal latencies with median ``median_s`` and 99th percentile TOOL_P99_S."""
    sigma = math.log(TOOL_P99_S / median_s) / statistics.NormalDist().inv_cdf(0.99)
    rng = random.Random(seed)
    mu = math.log(median_s)
    return [
        [[rng.lognormvariate(mu, sigma) for _ in range(calls)] for _ in range(turns - 1)] for _ in range(trajectories)
    ]


def percentiles(values: list[float]) -> dict[str, float]:
    """Nearest-rank p50/p90/p99, the maximum and the mean."""
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]

    return {"p50": rank(50), "p90": rank(90), "p99": rank(99), "max": ordered[-1], "mean": statistics.fmean(ordered)}


def ideal_bound(latencies: Latencies, turns: int, gen_latency: float) -> float:
    return max(turns * gen_latency + sum(max(turn) for turn in traj) for traj in latencies)


def batch_sync(latencies: Latencies, turns: int, gen_latency: float) -> float:
    """RL-Factory's schedule: generate for the whole batch, run all its calls, wait for the slowest."""
    start = time.perf_counter()
    with ThreadPoolExecutor(BATCH_SYNC_THREADS) as pool:
        for turn in range(turns):
            time.sleep(gen_latency)  # one batched generate call for every live trajectory
            if turn < turns - 1:
                wait([pool.submit(time.sleep, s) for traj in latencies for s in traj[turn]])
    return time.perf_counter() - start


def _call_text(seconds: float) -> str:
    return '<tool_call>\n{"name": "sleep", "arguments": ' + json.dumps({"seconds": seconds}) + "}\n</tool_call>"


def _script(traj: list[list[float]]) -> list[str]:
    """A trajectory's turns as a model trained on the template writes them: its calls one a line."""
    return ["\n".join(_call_text(s) for s in turn) for turn in traj] + ["done"]


def rlf_loop(latencies: Latencies, turns: int, gen_latency: float, use_async: bool = False) -> dict[str, Any]:
    """Wall and CPU time of the real loop over ``latencies``; raises if any trajectory went wrong."""
    trajectories, calls = len(latencies), len(latencies[0][0])
    scripts = {f"t{i}": _script(traj) for i, traj in enumerate(latencies)}
    longest = max(len(text.encode()) for script in scripts.values() for text in script)
    slowest = max(s for traj in latencies for turn in traj for s in turn)
    config = {
        "plugins": ["bench"],
        "rollout": {
            "max_turns": turns,
            "concurrency": trajectories,
            "max_response_tokens": 1 << 24,
            "max_total_tokens": 1 << 24,
            "sampling": {"max_tokens": longest + 16},
        },
        "tools": {"max_concurrency": trajectories * calls, "timeout_s": slowest + 60.0},
    }
    runtime = make_runtime(config, {"bench": SleepTools(use_async)})
    tokenizer = ByteChatTokenizer()
    loop = Rollout(runtime, ScriptedEngine(tokenizer, scripts, latency_s=gen_latency), tokenizer)
    rows = [normalize_row({"id": row_id, "prompt": "Wait as told, then say done."}) for row_id in scripts]
    cpu, wall = time.process_time(), time.perf_counter()
    done = asyncio.run(loop.run(rows, n=1))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    bad = [t for t in done if t.stop_reason != "answer" or t.tool_errors or t.num_turns != turns or t.template_mismatch]
    if bad:
        t = bad[0]
        raise RuntimeError(
            f"{len(bad)} trajectories did not run as scripted, e.g. {t.id}: stop_reason={t.stop_reason}, "
            f"turns={t.num_turns}, tool errors={t.tool_error_kinds}, error={t.error}, "
            f"template mismatch={t.template_mismatch}"
        )
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "tool_calls": sum(t.tool_calls for t in done),
        "turns": sum(t.num_turns for t in done),
    }


_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)


def bare_asyncio(latencies: Latencies, turns: int, gen_latency: float) -> dict[str, Any]:
    """The least a loop can do for the same work, with no framework: per trajectory and turn, wait
    the generation latency, encode the scripted text and decode it, read its calls with one regex
    and ``json.loads``, await the async ``sleep`` of each call together, and encode the observation
    the template would render; every trajectory at once on one event loop."""
    tokenizer = ByteChatTokenizer()
    eos = tokenizer.eos_token_ids[0]
    prompt = tokenizer.render([{"role": "user", "content": "Wait as told, then say done."}], None, True)

    async def one(script: list[str]) -> int:
        ids, calls_made = tokenizer.encode(prompt), 0
        for text in script:
            if gen_latency:
                await asyncio.sleep(gen_latency)
            generated = tokenizer.encode(text) + [eos]
            ids += generated
            calls = [json.loads(c) for c in _CALL.findall(tokenizer.decode(generated[:-1]))]
            if not calls:
                break
            results = await asyncio.gather(*(asyncio.sleep(c["arguments"]["seconds"], "ok") for c in calls))
            calls_made += len(calls)
            responses = "".join(f"\n<tool_response>\n{r}\n</tool_response>" for r in results)
            ids += tokenizer.encode(f"\n<|im_start|>user{responses}<|im_end|>\n<|im_start|>assistant\n")
        return calls_made

    async def everything() -> list[int]:
        return list(await asyncio.gather(*(one(_script(traj)) for traj in latencies)))

    cpu, wall = time.process_time(), time.perf_counter()
    made = asyncio.run(everything())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    expected = (turns - 1) * len(latencies[0][0])
    if any(n != expected for n in made):
        raise RuntimeError(f"bare asyncio made {made[:4]}... calls per trajectory, not {expected}")
    return {"wall_s": wall, "cpu_s": cpu, "tool_calls": sum(made), "turns": len(latencies) * turns}


class ScriptedVerlServer:
    """verl's LLM server client as the benchmark's scripted engine: the same script per trajectory,
    the same fixed latency per generate call. A trajectory is found by the ``trajectory N.`` of its
    prompt on its first request; verl keeps one request id for all turns of a trajectory."""

    def __init__(self, tokenizer: Any, scripts: list[list[str]], latency_s: float):
        self.tokenizer, self.scripts, self.latency_s = tokenizer, scripts, latency_s
        self.turns: dict[str, list[int]] = {}

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],  # noqa: ARG002 - verl's server API; the script decides the tokens
        **_: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.turns:
            text = self.tokenizer.decode(prompt_ids)
            self.turns[request_id] = [int(text.split("trajectory ")[1].split(".")[0]), 0]
        traj, turn = self.turns[request_id]
        self.turns[request_id][1] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        ids = self.tokenizer.encode(self.scripts[traj][turn] + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="completed")


def _verl_sleep_tool(use_async: bool) -> Any:
    """The benchmark's ``sleep`` tool as a verl function tool (sync ones run in a thread, as in rlf)."""
    from verl.tools.function_tool import FunctionTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    async def async_sleep(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "ok"

    def sync_sleep(seconds: float) -> str:
        time.sleep(seconds)
        return "ok"

    schema = OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": "sleep",
                "description": "Wait `seconds`, like a call to a slow service.",
                "parameters": {
                    "type": "object",
                    "properties": {"seconds": {"type": "number"}},
                    "required": ["seconds"],
                },
            },
        }
    )
    return FunctionTool(
        name="sleep", fn=async_sleep if use_async else sync_sleep, tool_schema=schema, is_async=use_async
    )


def verl_model(work: Path) -> Path:
    """A tiny Qwen-style tokenizer and model for verl's worker (it loads both from a folder)."""
    from rlfcore.tinymodel import build_tiny

    path = work / "model"
    if not (path / "config.json").exists():
        build_tiny(
            ["Wait as told, then say done. trajectory 12.", _call_text(0.5), "<tool_response>\nok\n</tool_response>"]
            * 20,
            path,
            vocab_size=300,
        )
    return path


def verl_tool_agent_loop(
    latencies: Latencies, turns: int, gen_latency: float, model: Path, use_async: bool = False
) -> dict[str, Any]:
    """Wall and CPU time of verl's ToolAgentLoop, driven through its real ``AgentLoopWorker.generate_sequences``
    over ``latencies``; raises if any trajectory went wrong."""
    import numpy as np
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from rlfcore.backends.verl.hydra import compose

    trajectories, calls = len(latencies), len(latencies[0][0])
    scripts = [_script(traj) for traj in latencies]
    roll = "actor_rollout_ref.rollout"
    cfg = compose(
        [
            f"actor_rollout_ref.model.path={model}",
            "data.max_prompt_length=1024",
            "data.max_response_length=16384",
            f"{roll}.name=vllm",
            f"{roll}.mode=async",
            f"{roll}.n=1",
            f"{roll}.agent.default_agent_loop=tool_agent",
            f"{roll}.multi_turn.enable=true",
            f"{roll}.multi_turn.max_assistant_turns={turns}",
            f"{roll}.multi_turn.max_parallel_calls={calls}",
            f"{roll}.multi_turn.format=hermes",
            f"{roll}.calculate_log_probs=true",
            "reward.num_workers=1",
        ]
    )

    async def scenario() -> tuple[DataProto, float, float]:
        worker = AgentLoopWorker(cfg, llm_client=None, reward_loop_worker_handles=None)
        worker.tools = [_verl_sleep_tool(use_async)]
        worker.llm_client = ScriptedVerlServer(worker.tokenizer, scripts, gen_latency)
        prompts = [
            [{"role": "user", "content": f"Wait as told, then say done. trajectory {i}."}] for i in range(trajectories)
        ]
        batch = DataProto.from_single_dict(
            {
                "raw_prompt": np.array(prompts + [None], dtype=object)[:-1],
                "agent_name": np.array(["tool_agent"] * trajectories, dtype=object),
                "index": np.arange(trajectories),
            }
        )
        cpu, wall = time.process_time(), time.perf_counter()
        out = await worker.generate_sequences(batch)
        return out, time.perf_counter() - wall, time.process_time() - cpu

    out, wall, cpu = asyncio.run(scenario())
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = [tokenizer.decode(ids.tolist()) for ids in out.batch["responses"]]
    bad = [
        i
        for i, text in enumerate(texts)
        if text.count("<tool_response>\nok") != (turns - 1) * calls or "done" not in text
    ]
    if bad:
        raise RuntimeError(
            f"{len(bad)} verl trajectories did not run as scripted, e.g. trajectory {bad[0]}: ...{texts[bad[0]][-300:]!r}"
        )
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "tool_calls": trajectories * (turns - 1) * calls,
        "turns": trajectories * turns,
    }


def verl_rows(latencies: Latencies, turns: int, gen_latency: float, zero: Latencies) -> dict[str, Any]:
    """verl's ToolAgentLoop with the sync and the async tool, and its CPU cost at zero latency; or why not."""
    if importlib.util.find_spec("verl") is None:
        return {"skipped": "verl not installed"}
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        model = verl_model(Path(work))
        verl_tool_agent_loop(zero[:2], turns, 0.0, model)  # warm-up, as for rlf
        sync = verl_tool_agent_loop(latencies, turns, gen_latency, model)
        asynchronous = verl_tool_agent_loop(latencies, turns, gen_latency, model, use_async=True)
        cost = verl_tool_agent_loop(zero, turns, 0.0, model, use_async=True)
    return {"wall_s": sync["wall_s"], "async_tool_wall_s": asynchronous["wall_s"], "framework_cpu": _cpu(cost)}


def _cpu(cost: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_calls": cost["tool_calls"],
        "turns": cost["turns"],
        "wall_s": cost["wall_s"],
        "cpu_s": cost["cpu_s"],
        "cpu_per_tool_call_s": cost["cpu_s"] / cost["tool_calls"],
        "cpu_per_turn_s": cost["cpu_s"] / cost["turns"],
    }


def scale_point(args: argparse.Namespace) -> dict[str, Any]:
    """``--scale`` trajectories at once with slower tools (median ``--scale-tool-median``), where
    the loop's CPU per call, not the tools, sets the wall time: rlf (sync and async tool), bare
    asyncio doing the same token work, and verl's ToolAgentLoop (async tool) if installed."""
    latencies = draw_latencies(args.scale, args.turns, args.calls, args.seed, args.scale_tool_median)
    ideal = ideal_bound(latencies, args.turns, args.gen_latency)
    rlf = rlf_loop(latencies, args.turns, args.gen_latency)
    rlf_async = rlf_loop(latencies, args.turns, args.gen_latency, use_async=True)
    bare = bare_asyncio(latencies, args.turns, args.gen_latency)
    out: dict[str, Any] = {
        "trajectories": args.scale,
        "tool_latency_model": {"kind": "lognormal", "median_s": args.scale_tool_median, "p99_s": TOOL_P99_S},
        "ideal_bound_s": ideal,
        "rlf_loop_s": rlf["wall_s"],
        "rlf_loop_async_tool_s": rlf_async["wall_s"],
        "bare_asyncio_s": bare["wall_s"],
        "verl_async_tool_s": None,
        "ratios": {
            "rlf_over_ideal": rlf["wall_s"] / ideal,
            "rlf_async_tool_over_ideal": rlf_async["wall_s"] / ideal,
            "bare_asyncio_over_ideal": bare["wall_s"] / ideal,
            "rlf_over_ideal_target": TARGET_SCALE_OVER_IDEAL,
        },
    }
    if importlib.util.find_spec("verl") is None:
        out["verl_skipped"] = "verl not installed"
    elif not args.scale_verl:
        out["verl_skipped"] = "run with --scale-verl (minutes at this size)"
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as work:
            model = verl_model(Path(work))
            verl = verl_tool_agent_loop(latencies, args.turns, args.gen_latency, model, use_async=True)
        out["verl_async_tool_s"] = verl["wall_s"]
        out["ratios"]["verl_async_tool_over_ideal"] = verl["wall_s"] / ideal
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    latencies = draw_latencies(args.trajectories, args.turns, args.calls, args.seed)
    drawn = [s for traj in latencies for turn in traj for s in turn]
    ideal = ideal_bound(latencies, args.turns, args.gen_latency)
    zero = [[[0.0] * args.calls for _ in range(args.turns - 1)] for _ in range(args.trajectories)]
    rlf_loop(zero[:2], args.turns, 0.0)  # warm-up: template compilation and first-call costs are paid once per process
    rlf = rlf_loop(latencies, args.turns, args.gen_latency)
    rlf_async = rlf_loop(latencies, args.turns, args.gen_latency, use_async=True)
    batch = batch_sync(latencies, args.turns, args.gen_latency)
    bare = bare_asyncio(latencies, args.turns, args.gen_latency)
    cost = rlf_loop(zero, args.turns, 0.0)
    cost_async = rlf_loop(zero, args.turns, 0.0, use_async=True)
    bare_cost = bare_asyncio(zero, args.turns, 0.0)
    verl = verl_rows(latencies, args.turns, args.gen_latency, zero)
    scale = scale_point(args) if args.scale else None
    return {
        "config": {
            "trajectories": args.trajectories,
            "turns": args.turns,
            "calls_per_turn": args.calls,
            "tool_turns": args.turns - 1,
            "gen_latency_s": args.gen_latency,
            "seed": args.seed,
            "tool_latency_model": {"kind": "lognormal", "median_s": TOOL_MEDIAN_S, "p99_s": TOOL_P99_S},
            "rollout_concurrency": args.trajectories,
            "tools_max_concurrency": args.trajectories * args.calls,
            "batch_sync_threads": BATCH_SYNC_THREADS,
        },
        "tool_latency_s": percentiles(drawn),
        "rlf_loop_s": rlf["wall_s"],
        "rlf_loop_async_tool_s": rlf_async["wall_s"],
        "ideal_bound_s": ideal,
        "batch_sync_s": batch,
        "bare_asyncio_s": bare["wall_s"],
        "verl_tool_agent_loop": verl,
        "framework_cpu": _cpu(cost),
        "framework_cpu_async_tool": _cpu(cost_async),
        "bare_asyncio_cpu": _cpu(bare_cost),
        "scale": scale,
        "ratios": {
            "rlf_over_ideal": rlf["wall_s"] / ideal,
            "rlf_over_ideal_target": TARGET_RLF_OVER_IDEAL,
            "rlf_async_tool_over_ideal": rlf_async["wall_s"] / ideal,
            "batch_sync_over_rlf": batch / rlf["wall_s"],
            "bare_asyncio_over_ideal": bare["wall_s"] / ideal,
        },
    }


def table(result: dict[str, Any]) -> str:
    c, cpu, r, lat = result["config"], result["framework_cpu"], result["ratios"], result["tool_latency_s"]
    lines = [
        f"{c['trajectories']} trajectories x {c['turns']} turns ({c['tool_turns']} with {c['calls_per_turn']} calls), "
        f"generation {c['gen_latency_s'] * 1000:g} ms, seed {c['seed']}",
        "tool latency (drawn): "
        + ", ".join(f"{k} {lat[k] * 1000:.1f} ms" for k in ("p50", "p90", "p99", "max", "mean")),
    ]
    verl = result["verl_tool_agent_loop"]
    ideal = result["ideal_bound_s"]

    def timed(seconds: float | None) -> tuple[str, str]:
        return ("-", "-") if seconds is None else (f"{seconds:.3f} s", f"{seconds / ideal:.2f}")

    rows = [
        ("ideal bound", f"{result['ideal_bound_s']:.3f} s", "1.00"),
        ("rlf loop", f"{result['rlf_loop_s']:.3f} s", f"{r['rlf_over_ideal']:.2f}"),
        ("rlf loop, async tool", f"{result['rlf_loop_async_tool_s']:.3f} s", f"{r['rlf_async_tool_over_ideal']:.2f}"),
        (
            "batch-synchronous",
            f"{result['batch_sync_s']:.3f} s",
            f"{result['batch_sync_s'] / result['ideal_bound_s']:.2f}",
        ),
        ("bare asyncio", f"{result['bare_asyncio_s']:.3f} s", f"{r['bare_asyncio_over_ideal']:.2f}"),
        ("verl ToolAgentLoop", *timed(verl.get("wall_s"))),
        ("verl, async tool", *timed(verl.get("async_tool_wall_s"))),
    ]
    lines += ["", f"{'policy':<22}{'wall':>12}{'x ideal':>10}"] + [f"{a:<22}{b:>12}{x:>10}" for a, b, x in rows]
    if "skipped" in verl:
        lines.append(f"  (verl ToolAgentLoop skipped: {verl['skipped']})")
    verdict = "within" if r["rlf_over_ideal"] <= r["rlf_over_ideal_target"] else "OVER"
    lines += [
        "",
        f"rlf / ideal = {r['rlf_over_ideal']:.3f} ({verdict} the {r['rlf_over_ideal_target']} target); "
        f"batch-sync / rlf = {r['batch_sync_over_rlf']:.2f}",
        f"framework CPU (zero latency): {cpu['tool_calls']} calls, {cpu['turns']} turns, wall {cpu['wall_s']:.3f} s, "
        f"CPU {cpu['cpu_s']:.3f} s",
        f"  {cpu['cpu_per_tool_call_s'] * 1e3:.3f} ms CPU per tool call, {cpu['cpu_per_turn_s'] * 1e3:.3f} ms per turn",
    ]
    a = result["framework_cpu_async_tool"]
    lines.append(
        f"  async tool: {a['cpu_per_tool_call_s'] * 1e3:.3f} ms CPU per tool call, {a['cpu_per_turn_s'] * 1e3:.3f} ms per turn"
    )
    b = result["bare_asyncio_cpu"]
    lines.append(
        f"bare asyncio CPU (zero latency, same token work): {b['cpu_per_tool_call_s'] * 1e3:.3f} ms per tool call, "
        f"{b['cpu_per_turn_s'] * 1e3:.3f} ms per turn"
    )
    if "framework_cpu" in verl:
        v = verl["framework_cpu"]
        lines += [
            f"verl ToolAgentLoop CPU (zero latency, async tool): wall {v['wall_s']:.3f} s, CPU {v['cpu_s']:.3f} s",
            f"  {v['cpu_per_tool_call_s'] * 1e3:.3f} ms CPU per tool call, {v['cpu_per_turn_s'] * 1e3:.3f} ms per turn",
        ]
    if result["scale"] is not None:
        lines += ["", *scale_table(result["scale"], c)]
    return "\n".join(lines)


def scale_table(scale: dict[str, Any], c: dict[str, Any]) -> list[str]:
    ideal, r, model = scale["ideal_bound_s"], scale["ratios"], scale["tool_latency_model"]
    verl = scale["verl_async_tool_s"]
    rows = [
        ("ideal bound", ideal),
        ("rlf loop", scale["rlf_loop_s"]),
        ("rlf loop, async tool", scale["rlf_loop_async_tool_s"]),
        ("bare asyncio", scale["bare_asyncio_s"]),
        ("verl, async tool", verl),
    ]
    lines = [
        f"scale point: {scale['trajectories']} trajectories x {c['turns']} turns ({c['tool_turns']} with "
        f"{c['calls_per_turn']} calls), generation {c['gen_latency_s'] * 1000:g} ms, tools lognormal median "
        f"{model['median_s'] * 1000:g} ms, p99 {model['p99_s'] * 1000:g} ms",
        f"{'policy':<22}{'wall':>12}{'x ideal':>10}",
    ]
    lines += [
        f"{a:<22}{'-' if b is None else f'{b:.3f} s':>12}{'-' if b is None else f'{b / ideal:.3f}':>10}"
        for a, b in rows
    ]
    if "verl_skipped" in scale:
        lines.append(f"  (verl skipped: {scale['verl_skipped']})")
    verdict = "within" if r["rlf_over_ideal"] <= r["rlf_over_ideal_target"] else "OVER"
    lines.append(f"rlf / ideal at scale = {r['rlf_over_ideal']:.3f} ({verdict} the {r['rlf_over_ideal_target']} goal)")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=256)
    parser.add_argument("--turns", type=int, default=4, help="generate calls per trajectory; the last answers")
    parser.add_argument("--calls", type=int, default=2, help="tool calls in each turn but the last")
    parser.add_argument("--gen-latency", type=float, default=0.05, help="seconds per generate call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=1024, help="trajectories at the scale point (0: skip it)")
    parser.add_argument("--scale-tool-median", type=float, default=0.1, help="median tool seconds at the scale point")
    parser.add_argument("--scale-verl", action="store_true", help="run verl's ToolAgentLoop at the scale point too")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.trajectories < 1 or args.turns < 2 or args.calls < 1 or args.gen_latency < 0:
        parser.error("need --trajectories >= 1, --turns >= 2, --calls >= 1 and --gen-latency >= 0")
    if args.scale < 0 or not 0 < args.scale_tool_median < TOOL_P99_S:
        parser.error(f"need --scale >= 0 and 0 < --scale-tool-median < {TOOL_P99_S} (the tools' p99)")
    result = run(args)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
