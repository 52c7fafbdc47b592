"""Asynchronous GRPO against the synchronous trainer: wall time to the same reward, same seeds.

Each mode (``trainer.max_staleness`` 0, 1, 2) trains the embedded calculator task from the same SFT
warm start with ``rlf train``, on two workloads: the calculator MCP server answering after a
heavy-tailed delay (log-normal, median ``--delay-ms``, as a search engine or a sandbox would), and
with no delay (compute-bound). Reported per run: wall time of the GRPO phase, the step at which the
reward's moving mean (``--window`` steps) first reaches ``--target`` and the seconds to it, the final
reward (mean of the last ``--window`` steps), the trainer's idle wait for rollouts, and the
asynchronous correction's figures (staleness, logprob gap, share beyond the bound, clip fraction).

    python benchmarks/async_grpo.py --sft-model runs/calc/checkpoints/sft/model [--steps 40]

Without ``--sft-model`` the warm start is trained first (``rlf train … trainer.steps=0``, about 3
minutes on two cores). Prints a table and writes JSON to benchmarks/results/async_grpo.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "calculator"


def config(steps: int, staleness: int, delay_ms: float, model: Path, seed: int) -> dict[str, Any]:
    """The embedded example's config, absolute paths, from the warm start, the calculator delayed."""
    cfg = yaml.safe_load((EXAMPLE / "run.yaml").read_text())
    cfg["model"] = {"path": str(model)}
    cfg["data"] = {"train": str(EXAMPLE / "questions.jsonl")}
    cfg.pop("sft", None)
    server = [sys.executable, "-m", "rlf_mcp.servers.calculator", "--delay-ms", str(delay_ms), "--seed", str(seed)]
    cfg["mcp"] = {"servers": {"calculator": {"command": server[0], "args": server[1:]}}}
    in_flight = cfg["trainer"]["prompts_per_step"] * cfg["rollout"]["n"] * (staleness + 1)  # every step in flight
    cfg["tools"] = {"timeout_s": max(5.0, 40 * delay_ms / 1000), "max_concurrency": in_flight}
    cfg["rollout"]["concurrency"] = in_flight
    cfg["trainer"].update(steps=steps, max_staleness=staleness, checkpoint_every=steps, samples_per_step=0)
    return dict(cfg)


def warm_start(work: Path) -> Path:
    run = work / "sft"
    subprocess.run(
        [sys.executable, "-m", "rlfcore", "train", str(EXAMPLE / "run.yaml"), "trainer.steps=0", "--run-dir", str(run)],
        check=True,
    )
    return run / "checkpoints" / "sft" / "model"


def train(cfg: dict[str, Any], work: Path, name: str) -> tuple[list[dict[str, Any]], float]:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = work / name
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rlfcore", "train", str(path), "--run-dir", str(run)],
        check=False,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return rows, wall


def summarize(rows: list[dict[str, Any]], wall: float, target: float, window: int) -> dict[str, Any]:
    rewards = [r["reward_mean"] for r in rows]
    elapsed, reached = 0.0, None
    for i, r in enumerate(rows):
        elapsed += r["step_s"]
        if reached is None and i + 1 >= window and statistics.fmean(rewards[i + 1 - window : i + 1]) >= target:
            reached = (i + 1, elapsed)
    grpo_s = sum(r["step_s"] for r in rows)
    out: dict[str, Any] = {
        "wall_s": wall,
        "grpo_s": grpo_s,
        "first_reward": statistics.fmean(rewards[:window]),
        "final_reward": statistics.fmean(rewards[-window:]),
        "target_step": reached[0] if reached else None,
        "target_s": reached[1] if reached else None,
        "wait_s": sum(r.get("wait_s", r["rollout_s"] + r["score_s"]) for r in rows),
        "clip_frac": statistics.fmean(r["clip_frac"] for r in rows),
    }
    for key in ("staleness_mean", "staleness_max", "is_gap_mean", "is_gap_max", "is_beyond_bound"):
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = max(values) if key.endswith("_max") else statistics.fmean(values)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sft-model", type=Path, help="the warm start (default: trained here first)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--delay-ms", type=float, default=300.0, help="median tool delay of the waiting workload")
    p.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--workloads", nargs="+", choices=["delayed", "plain"], default=["delayed", "plain"])
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "async_grpo.json")
    args = p.parse_args()

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlf-async-") as tmp:
        work = Path(tmp)
        model = args.sft_model.resolve() if args.sft_model else warm_start(work)
        for workload in args.workloads:
            delay = args.delay_ms if workload == "delayed" else 0.0
            for k in args.staleness:
                rows, wall = train(config(args.steps, k, delay, model, args.seed), work, f"{workload}-k{k}")
                row = {
                    "workload": workload,
                    "delay_ms": delay,
                    "max_staleness": k,
                    **summarize(rows, wall, args.target, args.window),
                }
                results.append(row)
                print(json.dumps(row), flush=True)

    print(f"\n{args.steps} GRPO steps per run; target: reward mean over {args.window} steps >= {args.target}")
    head = f"{'workload':9} {'k':>2} {'GRPO s':>7} {'x sync':>6} {'to target':>12} {'first':>6} {'final':>6} {'wait s':>7} {'stale':>5} {'gap':>6} {'gap max':>7} {'beyond':>7} {'clip':>6}"
    print(head)
    for r in results:
        sync = [x for x in results if x["workload"] == r["workload"] and x["max_staleness"] == 0]
        speed = sync[0]["grpo_s"] / r["grpo_s"] if sync else float("nan")  # nan: no synchronous run to compare
        target = f"{r['target_s']:.0f}s@{r['target_step']}" if r["target_s"] is not None else "not reached"
        print(
            f"{r['workload']:9} {r['max_staleness']:>2} {r['grpo_s']:>7.1f} {speed:>6.2f} {target:>12} "
            f"{r['first_reward']:>6.3f} {r['final_reward']:>6.3f} {r['wait_s']:>7.1f} {r.get('staleness_mean', 0):>5.2f} "
            f"{r.get('is_gap_mean', 0):>6.3f} {r.get('is_gap_max', 0):>7.3f} {r.get('is_beyond_bound', 0):>7.4f} {r['clip_frac']:>6.4f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2))


if __name__ == "__main__":
    main()
