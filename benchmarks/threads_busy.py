"""Seconds per SFT step and per decode step of the embedded default's model, by torch thread setting
and OpenMP wait policy, with busy loops holding every core and without.

Why: ``rlf train examples/calculator/run.yaml`` took 10x longer with other work on the two cores
(SFT 776 s against 78 s). torch starts one OpenMP thread per core, and each of the tiny model's many
small ops ends at a barrier: when the other work holds one core, the thread that reached the barrier
first spins there (libgomp's default wait policy, up to ~300,000 rounds) while the one it waits for
is off the CPU, so every op can cost a scheduler time slice.

Each measurement runs in a fresh child process, so that its settings apply before torch (and its
OpenMP runtime) load; the child sets them in ``os.environ`` before ``import torch``, as ``rlf`` does
at start:

- ``default``: torch's defaults (one thread per core, active waiting).
- ``1 thread``: ``torch.set_num_threads(1)``.
- ``passive``: torch's thread count, ``OMP_WAIT_POLICY=PASSIVE`` (a thread at a barrier sleeps).
- ``spin 10k``: ``GOMP_SPINCOUNT=10000`` (a thread spins 10,000 rounds at a barrier, then sleeps).
- ``rlf``: what ``rlf`` sets at its start (:func:`rlfcore.cpus.apply`: ``GOMP_SPINCOUNT=1000``, and
  the thread count within a cgroup CPU quota, if there is one).

Loads: ``none`` (no load started here; other users' work may be running: the load average is printed
beside each figure) and ``busy`` (``--busy`` pure-Python busy loops, started here, one per core by
default). The runs are interleaved (every setting under both loads in each round, the order alternating
between rounds), so that a change in the other work falls on all alike. An SFT step is forward,
backward and AdamW on ``--batch`` rows of ``--tokens`` tokens, as ``sft.batch_size`` does; a decode
step is one new token for ``--rows`` rows over a ``--tokens``-column KV cache.

    python benchmarks/threads_busy.py [--rounds 3] [--sft-steps 3] [--decode-steps 10] [--busy N]
        [--settings default "1 thread" passive "spin 10k" rlf] [--quickstart PAIRS]

With ``--quickstart PAIRS`` it times ``rlf train examples/calculator/run.yaml`` instead, short
(``--quickstart-overrides``, default ``sft.steps=8 trainer.steps=1``), in pairs under both loads:
with OpenMP's own defaults (torch imported before ``rlf``'s start) against ``rlf`` as it is.

Prints a table (median seconds per step, spread, CPU seconds per step, load average), then each
round's ratios to ``rlf`` under the same load, and writes JSON to benchmarks/results/threads_busy.json
(or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(__file__).parent / "results" / "threads_busy.json"
SPINS = {"spin 10k": "10000"}
"""Bounded spinning: a thread at a barrier spins this many rounds (GOMP_SPINCOUNT), then sleeps."""
SETTINGS = ("default", "1 thread", "passive", *SPINS, "rlf")
LOADS = ("none", "busy")


def child(setting: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, in this (fresh) process: settings first, then torch."""
    if setting == "passive":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    elif setting in SPINS:
        os.environ["GOMP_SPINCOUNT"] = SPINS[setting]
    elif setting == "rlf":
        from rlfcore import cpus

        cpus.apply()
    import torch

    if setting == "1 thread":
        torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    from engine_throughput import embedded_model

    model = embedded_model(0)
    vocab = model.config.vocab_size
    out: dict[str, Any] = {"threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(1, vocab, (args.batch, args.tokens), generator=torch.Generator().manual_seed(1))

    def sft_step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    out["sft"] = _timed(sft_step, args.sft_steps)

    model.eval()
    prompt = torch.randint(1, vocab, (args.rows, args.tokens), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache = model(input_ids=prompt, use_cache=True).past_key_values
        token = prompt[:, -1:]

        def decode_step() -> None:
            model(input_ids=token, past_key_values=cache, use_cache=True)
            cache.crop(args.tokens)  # the same cache length at every step

        out["decode"] = _timed(decode_step, args.decode_steps)
    return out


def _timed(step: Any, steps: int) -> dict[str, float]:
    """Wall and CPU seconds per step, after one warm-up step."""
    step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return {"wall": (time.perf_counter() - wall) / steps, "cpu": (time.process_time() - cpu) / steps}


def measure(setting: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`child` in a fresh process with a clean OpenMP environment; its answer and the load."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    load = os.getloadavg()[0]
    cmd = [sys.executable, __file__, "--child", setting, *_child_args(args)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=args.timeout)
    if done.returncode:
        raise RuntimeError(f"{setting}: the child failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"] = load
    return result


def _child_args(args: argparse.Namespace) -> list[str]:
    return [
        *("--sft-steps", str(args.sft_steps), "--decode-steps", str(args.decode_steps)),
        *("--batch", str(args.batch), "--rows", str(args.rows), "--tokens", str(args.tokens)),
    ]


def busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every (load, setting) once per round, the order alternating between rounds."""
    settings = args.settings
    results: dict[str, list[dict[str, Any]]] = {f"{load}/{s}": [] for load in LOADS for s in settings}
    for r in range(args.rounds):
        loads = LOADS if r % 2 == 0 else LOADS[::-1]
        for load in loads:
            procs = busy_loops(args.busy) if load == "busy" else []
            try:
                if procs:
                    time.sleep(1.0)  # the loops on the CPUs before the first measurement
                for setting in settings if r % 2 == 0 else settings[::-1]:
                    got = measure(setting, args)
                    results[f"{load}/{setting}"].append(got)
                    print(
                        f"round {r + 1} {load:>4} {setting:>8}: threads {got['threads']}, "
                        f"SFT {got['sft']['wall']:.3f} s/step, decode {got['decode']['wall'] * 1e3:.1f} ms/step, "
                        f"load {got['load']:.1f}",
                        flush=True,
                    )
            finally:
                stop(procs)
    return results


OPENMP_DEFAULTS = "import sys, torch\nfrom rlfcore.cli import main\nmain(sys.argv[1:])"
"""``rlf`` with torch (and OpenMP) loaded before its start sets anything: OpenMP's own defaults."""
RLF = "import sys\nfrom rlfcore.cli import main\nmain(sys.argv[1:])"


def quickstart(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """``rlf train`` of the embedded default, short, with OpenMP's defaults and as ``rlf`` sets it, in
    pairs under both loads, the orders alternating; seconds of SFT, GRPO and the whole command."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    train = ["train", str(ROOT / "examples" / "calculator" / "run.yaml"), *args.quickstart_overrides]
    rows: list[dict[str, Any]] = []
    for pair in range(args.quickstart):
        for load in LOADS if pair % 2 == 0 else LOADS[::-1]:
            procs = busy_loops(args.busy) if load == "busy" else []
            try:
                for arm, code in [("openmp defaults", OPENMP_DEFAULTS), ("rlf", RLF)][:: 1 if pair % 2 == 0 else -1]:
                    run_dir = work / f"{pair}-{load}-{arm.replace(' ', '_')}"
                    cmd = [sys.executable, "-c", code, *train, "--run-dir", str(run_dir)]
                    load_avg, t0 = os.getloadavg()[0], time.perf_counter()
                    subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, check=True, timeout=args.timeout)
                    summary = json.loads((run_dir / "summary.json").read_text())
                    row = {"pair": pair + 1, "load": load, "arm": arm, "wall": time.perf_counter() - t0}
                    row.update(sft=summary["sft_s"], grpo=summary["grpo_s"], load_average=load_avg)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                stop(procs)
    return rows


def quickstart_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| pair | load | SFT s: OpenMP defaults -> rlf | GRPO s | command s | load average |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for pair in sorted({r["pair"] for r in rows}):
        for load in LOADS:
            old, new = (
                next(r for r in rows if (r["pair"], r["load"], r["arm"]) == (pair, load, a))
                for a in ("openmp defaults", "rlf")
            )
            lines.append(
                f"| {pair} | {load} | {old['sft']:.2f} -> {new['sft']:.2f} ({old['sft'] / new['sft']:.1f}x) | "
                f"{old['grpo']:.2f} -> {new['grpo']:.2f} | {old['wall']:.1f} -> {new['wall']:.1f} | "
                f"{old['load_average']:.1f} / {new['load_average']:.1f} |"
            )
    return "\n".join(lines)


def table(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.rounds} interleaved rounds; SFT: {args.batch} rows x {args.tokens} tokens; decode: {args.rows} rows, "
        f"{args.tokens} cached; busy: {args.busy} busy loops; {os.cpu_count()} CPUs",
        "| load | setting | threads | SFT s/step (median [min-max]) | SFT CPU s/step | decode ms/step | "
        "decode CPU ms/step | load average |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, runs in results.items():
        load, setting = key.split("/")
        sft = [r["sft"]["wall"] for r in runs]
        dec = [r["decode"]["wall"] * 1e3 for r in runs]
        lines.append(
            f"| {load} | {setting} | {runs[0]['threads']} | {statistics.median(sft):.3f} [{min(sft):.3f}-{max(sft):.3f}] | "
            f"{statistics.median(r['sft']['cpu'] for r in runs):.3f} | "
            f"{statistics.median(dec):.1f} [{min(dec):.1f}-{max(dec):.1f}] | "
            f"{statistics.median(r['decode']['cpu'] * 1e3 for r in runs):.1f} | "
            f"{min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f} |"
        )
    return "\n".join(lines + ["", *paired(results)])


def paired(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per round and load: each setting's seconds per SFT step (and per decode step) over ``rlf``'s."""
    others = [k.split("/")[1] for k in results if k.startswith("none/") and k != "none/rlf"]
    if "none/rlf" not in results or not others:
        return []
    lines = [
        "Paired, SFT (decode) seconds per step over rlf's, same round and load:",
        f"| round | load | {' | '.join(others)} |",
        f"| --- | --- |{' --- |' * len(others)}",
    ]
    for load in LOADS:
        for i, base in enumerate(results[f"{load}/rlf"]):
            cells = [
                f"{r['sft']['wall'] / base['sft']['wall']:.2f}x ({r['decode']['wall'] / base['decode']['wall']:.2f}x)"
                for r in (results[f"{load}/{s}"][i] for s in others)
            ]
            lines.append(f"| {i + 1} | {load} | {' | '.join(cells)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--sft-steps", type=int, default=3)
    parser.add_argument("--decode-steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32, help="rows of an SFT step (sft.batch_size)")
    parser.add_argument("--rows", type=int, default=64, help="rows of a decode step (engine.max_batch_size)")
    parser.add_argument("--tokens", type=int, default=48, help="tokens per SFT row; KV columns of a decode step")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy loops of the busy load")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one child may take")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quickstart", type=int, default=0, metavar="PAIRS", help="pairs of rlf train runs instead")
    parser.add_argument("--quickstart-overrides", nargs="+", default=["sft.steps=8", "trainer.steps=1"])
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    if args.quickstart:
        with tempfile.TemporaryDirectory(prefix="threads_busy_") as work:
            rows = quickstart(args, Path(work))
        print(quickstart_table(rows))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"quickstart": rows}, indent=2))
        return
    results = run(args)
    text = table(results, args)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2))


if __name__ == "__main__":
    main()
