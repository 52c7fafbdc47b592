"""Tokens/s and requests/s of the local rollout engine, static against continuous batching, on a
multi-turn workload where rows come back from tool calls at different times.

Both rows run :class:`~rlfcore.engines.transformers.TransformersEngine` on the same model and the same
workload in this process, their runs interleaved (so that the machine's load falls on both alike):

- ``static``: ``scheduling="static"``, the former engine: requests that arrive while a batch decodes
  wait for all of it to finish, then form the next batch.
- ``continuous``: the default: arrivals are prefilled between decode steps and join the running rows,
  finished rows leave at once, and a trajectory's next turn reuses its previous turn's KV cache (only
  the tool result and what follows are prefilled).

The model is a randomly initialised Qwen3 of the embedded default's shape (``model.init`` of
``examples/calculator/run.yaml``: vocabulary, width, layers, heads), float32, on ``--threads`` torch
threads. The workload is a GRPO step of that task: ``--trajectories`` trajectories, each ``--turns``
generate calls; the prompt is ``--prompt`` tokens, each turn's length is drawn from a seeded uniform
over ``[--min-tokens, --max-tokens]`` (a random model never stops on its own, so ``max_tokens`` sets it),
and between turns the trajectory waits for a "tool" (a seeded lognormal sleep, median ``--tool-median``)
and appends ``--observation`` tokens before its next turn. Sampling is seeded per request (temperature 1),
so both engines generate the same tokens. A warm-up run of each comes first. Wall seconds are the
median over ``--repeats`` (with their spread); CPU seconds are this process's, which a loaded machine
inflates less than wall time.

    python benchmarks/engine_throughput.py [--trajectories 64] [--turns 3] [--threads 1] [--repeats 3]

Prints a table and writes JSON to benchmarks/results/engine_throughput.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN_YAML = ROOT / "examples" / "calculator" / "run.yaml"
DEFAULT_OUT = Path(__file__).parent / "results" / "engine_throughput.json"
SCHEDULINGS = ("static", "continuous")


def embedded_model(seed: int) -> Any:
    """A random Qwen3 of the embedded default's shape (``model.init`` in run.yaml)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    init = yaml.safe_load(RUN_YAML.read_text())["model"]["init"]
    config = Qwen3Config(
        vocab_size=init["vocab_size"],
        hidden_size=init["hidden_size"],
        num_hidden_layers=init["num_layers"],
        num_attention_heads=init["num_heads"],
        num_key_value_heads=init["num_kv_heads"],
        head_dim=init["hidden_size"] // init["num_heads"],
        intermediate_size=init["intermediate_size"],
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float().eval()


def workload(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per trajectory: its prompt, each turn's length, each tool wait and observation (seeded)."""
    rng = random.Random(args.seed)
    vocab = yaml.safe_load(RUN_YAML.read_text())["model"]["init"]["vocab_size"]
    sigma = 1.0
    out = []
    for _ in range(args.trajectories):
        out.append(
            {
                "prompt": [rng.randrange(1, vocab) for _ in range(args.prompt)],
                "lengths": [rng.randint(args.min_tokens, args.max_tokens) for _ in range(args.turns)],
                "waits": [args.tool_median * rng.lognormvariate(0.0, sigma) for _ in range(args.turns - 1)],
                "observations": [
                    [rng.randrange(1, vocab) for _ in range(args.observation)] for _ in range(args.turns - 1)
                ],
            }
        )
    return out


async def run_once(engine: Any, trajectories: list[dict[str, Any]], seed: int) -> tuple[float, list[list[int]]]:
    """All trajectories concurrently through ``engine``; the wall seconds and every turn's tokens."""
    from rlfcore.engines.base import SamplingParams

    async def trajectory(i: int, t: dict[str, Any]) -> list[int]:
        ids = list(t["prompt"])
        made: list[int] = []
        for turn, length in enumerate(t["lengths"]):
            params = SamplingParams(temperature=1.0, max_tokens=length, seed=seed + 1000 * i + turn)
            gen = await engine.generate(ids, params, request_id=str(i))
            ids += gen.token_ids
            made += gen.token_ids
            if turn < len(t["waits"]):
                await asyncio.sleep(t["waits"][turn])
                ids += t["observations"][turn]
        return made

    start = time.perf_counter()
    made = await asyncio.gather(*(trajectory(i, t) for i, t in enumerate(trajectories)))
    return time.perf_counter() - start, made


def measure(model: Any, trajectories: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each scheduling's figures from ``--repeats`` runs, interleaved (static, continuous, continuous,
    static, ...) so that a change in the machine's load falls on both alike."""
    from rlfcore.engines.transformers import TransformersEngine

    engines = {
        s: TransformersEngine(
            model, max_batch_size=args.max_batch_size, threads=args.threads, scheduling=s, pad_token_id=0
        )
        for s in SCHEDULINGS
    }
    for engine in engines.values():
        asyncio.run(run_once(engine, trajectories[: max(1, len(trajectories) // 4)], args.seed))  # warm-up
    before = {s: dataclasses.replace(e.stats) for s, e in engines.items()}
    walls: dict[str, list[float]] = {s: [] for s in SCHEDULINGS}
    cpus: dict[str, list[float]] = {s: [] for s in SCHEDULINGS}
    made: dict[str, list[list[int]]] = {}
    for i in range(args.repeats):
        for s in SCHEDULINGS if i % 2 == 0 else SCHEDULINGS[::-1]:
            cpu = time.process_time()
            wall, made[s] = asyncio.run(run_once(engines[s], trajectories, args.seed))
            cpus[s].append(time.process_time() - cpu)
            walls[s].append(wall)
    results = {}
    for s, engine in engines.items():
        generated = sum(len(m) for m in made[s])
        requests = len(trajectories) * args.turns
        wall = statistics.median(walls[s])
        now, then = engine.stats, before[s]
        results[s] = {
            "wall_s": wall,
            "walls_s": walls[s],
            "cpu_s": statistics.median(cpus[s]),
            "cpus_s": cpus[s],
            "tokens": generated,
            "requests": requests,
            "tokens_per_s": generated / wall,
            "requests_per_s": requests / wall,
            "forward_passes_per_run": (now.forward_passes - then.forward_passes) / args.repeats,
            "prefills_per_run": (now.batches - then.batches) / args.repeats,
            "joins_per_run": (now.joins - then.joins) / args.repeats,
            "reused_prompt_tokens_per_run": (now.reused_tokens - then.reused_tokens) / args.repeats,
            "tokens_made": made[s],
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=120, help="prompt tokens")
    parser.add_argument("--min-tokens", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--observation", type=int, default=12, help="tokens a tool result adds")
    parser.add_argument("--tool-median", type=float, default=0.005, help="median tool seconds (lognormal, sigma 1)")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.trajectories < 1 or args.turns < 1 or args.repeats < 1 or not 1 <= args.min_tokens <= args.max_tokens:
        parser.error(
            "need --trajectories, --turns, --repeats >= 1 and 1 <= --min-tokens <= --max-tokens, got "
            f"{args.trajectories}, {args.turns}, {args.repeats}, {args.min_tokens}, {args.max_tokens}"
        )
    import torch

    torch.set_num_threads(args.threads)
    model = embedded_model(args.seed)
    trajectories = workload(args)
    results = measure(model, trajectories, args)
    same = results["static"].pop("tokens_made") == results["continuous"].pop("tokens_made")
    static, cont = results["static"], results["continuous"]
    ratio = {
        "tokens_per_s": cont["tokens_per_s"] / static["tokens_per_s"],
        "requests_per_s": cont["requests_per_s"] / static["requests_per_s"],
    }
    print(
        f"{args.trajectories} trajectories x {args.turns} turns ({args.min_tokens}-{args.max_tokens} tokens each), "
        f"{args.prompt}-token prompts, tools median {args.tool_median * 1000:.0f} ms, {args.threads} thread(s), "
        f"median of {args.repeats} interleaved runs, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'engine':<12} {'wall s':>8} {'spread':>13} {'CPU s':>7} {'tokens/s':>10} {'requests/s':>11} {'passes':>8} {'prefills':>9} {'joins':>7} {'reused':>8}"
    )
    for name in SCHEDULINGS:
        r = results[name]
        print(
            f"{name:<12} {r['wall_s']:>8.3f} {min(r['walls_s']):>6.2f}-{max(r['walls_s']):<6.2f} {r['cpu_s']:>7.2f} {r['tokens_per_s']:>10.0f} {r['requests_per_s']:>11.1f} "
            f"{r['forward_passes_per_run']:>8.0f} {r['prefills_per_run']:>9.0f} {r['joins_per_run']:>7.0f} {r['reused_prompt_tokens_per_run']:>8.0f}"
        )
    print(
        f"continuous / static: {ratio['tokens_per_s']:.2f}x tokens/s, {ratio['requests_per_s']:.2f}x requests/s; "
        f"same tokens from both: {same}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"config": config, **results, "ratio": ratio, "same_tokens": same}, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
