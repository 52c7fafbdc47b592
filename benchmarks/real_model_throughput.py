"""Tokens/s of rlf's rollout engine on a real pretrained model, against transformers' ``generate``
and vLLM's CPU build: the same prompts, the same number of new tokens, the same sampling.

The model is SmolLM2-135M-Instruct as ``rlf models fetch smollm2-135m-instruct`` makes it (fetched
on first use, then cached), or any model folder with a chat template (``--model DIR``). The prompts
are the held-out questions of ``examples/smollm2-calculator/heldout.jsonl`` (cycled past 200),
rendered with the model's chat template for a generation. Every row makes exactly ``--new-tokens``
tokens (end-of-turn tokens do not stop it), sampled at temperature 1, top-p 1, seeded:

- ``rlf engine``: :class:`~rlfcore.engines.transformers.TransformersEngine`, every prompt a concurrent
  ``generate`` call with its own seed, ``--prompts`` rows in one batch.
- ``transformers generate``: one batched, left-padded ``model.generate`` call (``do_sample``,
  ``min_new_tokens`` = ``max_new_tokens``), torch's global generator seeded.
- ``vLLM-CPU``: offline ``LLM.generate`` (``ignore_eos``, a seed per prompt) in the vLLM venv
  (``.venv-verl-cpu``, ``scripts/setup-verl-cpu.sh``), a subprocess on the same folder; its row says
  why when that venv is missing.

rlf and ``generate`` run in this process, their runs interleaved (``--repeats`` each, the order
alternating) with the load average read beside each run, for each of ``--threads`` (torch's
intra-op threads, e.g. ``1,2``). Tokens/s counts generated tokens over wall seconds, prefill
included; the figure is the median run. ``--drift-rows`` rows of rlf's first run are then scored
teacher-forced in float32 and in the run's dtype: the mean and max |Δ logprob| over their tokens.

    python benchmarks/real_model_throughput.py [--dtype bfloat16] [--prompts 64] [--new-tokens 128] [--threads 1,2]

Prints a table and writes JSON to benchmarks/results/real_model_throughput.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "examples" / "smollm2-calculator" / "heldout.jsonl"
VLLM_PYTHON = ROOT / ".venv-verl-cpu" / "bin" / "python"
DEFAULT_OUT = Path(__file__).parent / "results" / "real_model_throughput.json"
GOALS = {"transformers generate": 3.0, "vLLM-CPU": 1.0}
"""rlf's tokens/s over each peer's that the issue asks for."""

VLLM_CHILD = """
import json, sys, time
from vllm import LLM, SamplingParams
if __name__ == "__main__":
    job = json.load(open(sys.argv[1]))
    llm = LLM(model=job["model"], dtype=job["dtype"], seed=0, max_num_seqs=len(job["prompts"]))
    params = [SamplingParams(temperature=1.0, top_p=1.0, max_tokens=job["new"], ignore_eos=True, seed=i)
              for i in range(len(job["prompts"]))]
    prompts = [{"prompt_token_ids": p} for p in job["prompts"]]
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up
    walls, tokens = [], 0
    for _ in range(job["repeats"]):
        start = time.perf_counter()
        out = llm.generate(prompts, params, use_tqdm=False)
        walls.append(time.perf_counter() - start)
        tokens = sum(len(o.outputs[0].token_ids) for o in out)
    print("RESULT " + json.dumps({"walls_s": walls, "tokens": tokens}))
"""


def model_folder(args: argparse.Namespace) -> Path:
    """``--model``, else the fetched SmolLM2 folder (float32: the engine casts it to ``--dtype``)."""
    if args.model is not None:
        return args.model
    from rlfcore.models import KNOWN, fetch

    return fetch(KNOWN["smollm2-135m-instruct"], "float32", say=lambda _: None)


def render_prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """The held-out questions (cycled), each a user turn rendered for the assistant's answer."""
    questions = [json.loads(line)["prompt"] for line in HELDOUT.read_text().splitlines() if line.strip()]
    rendered = []
    for i in range(count):
        messages = [{"role": "user", "content": questions[i % len(questions)]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        rendered.append(list(ids))
    return rendered


def run_rlf(model: Any, prompts: list[list[int]], new: int, threads: int, pad: int) -> tuple[float, list[list[int]]]:
    """One batch of every prompt through a fresh engine: wall seconds and each row's tokens."""
    from rlfcore.engines.base import SamplingParams
    from rlfcore.engines.transformers import TransformersEngine

    engine = TransformersEngine(model, max_batch_size=len(prompts), threads=threads, pad_token_id=pad)

    async def batch() -> list[list[int]]:
        params = [SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new, seed=i) for i in range(len(prompts))]
        gens = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, params)))
        return [g.token_ids for g in gens]

    start = time.perf_counter()
    made = asyncio.run(batch())
    return time.perf_counter() - start, made


def run_generate(
    model: Any, prompts: list[list[int]], new: int, threads: int, pad: int
) -> tuple[float, list[list[int]]]:
    """One left-padded, batched ``model.generate`` call: wall seconds (padding included) and each row's tokens."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    try:
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask.long(),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=pad,
            )
        wall = time.perf_counter() - start
    finally:
        torch.set_num_threads(before)
    return wall, out[:, width:].tolist()


def run_vllm(
    folder: Path, dtype: str, prompts: list[list[int]], new: int, repeats: int, threads: int
) -> dict[str, Any]:
    """vLLM-CPU's figures from its own venv, or ``{"skipped": why}``."""
    if not VLLM_PYTHON.is_file():
        return {"skipped": f"no vLLM venv at {VLLM_PYTHON.relative_to(ROOT)} (scripts/setup-verl-cpu.sh builds it)"}
    with tempfile.TemporaryDirectory() as tmp:
        job, child = Path(tmp) / "job.json", Path(tmp) / "vllm_child.py"
        job.write_text(
            json.dumps({"model": str(folder), "dtype": dtype, "prompts": prompts, "new": new, "repeats": repeats})
        )
        child.write_text(VLLM_CHILD)
        env = {  # a KV cache of its own size: by default vLLM-CPU reserves 92% of the machine's memory
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": str(threads),
            "VLLM_CPU_KVCACHE_SPACE": "2",
        }
        loads = [os.getloadavg()[0]]
        proc = subprocess.run(
            [str(VLLM_PYTHON), str(child), str(job)], capture_output=True, text=True, env=env, timeout=3600, check=False
        )
        loads.append(os.getloadavg()[0])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"skipped": f"vLLM-CPU failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"}
    result = json.loads(lines[-1].removeprefix("RESULT "))
    return {**result, "loads": loads, "threads": threads}


def drift(folder: Path, dtype: str, prompts: list[list[int]], made: list[list[int]]) -> dict[str, float]:
    """|Δ| between the logprobs of ``made`` (teacher-forced after each prompt) in float32 and in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    def logprobs(torch_dtype: Any) -> list[torch.Tensor]:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype).eval()
        out = []
        with torch.no_grad():
            for prompt, tokens in zip(prompts, made):
                ids = torch.tensor([prompt + tokens])
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
                out.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1))
        return out

    delta = torch.cat([(a - b).abs() for a, b in zip(logprobs(torch.float32), logprobs(getattr(torch, dtype)))])
    return {"rows": len(made), "tokens": len(delta), "mean_abs": float(delta.mean()), "max_abs": float(delta.max())}


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0912, PLR0915 - the script's steps, in order
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="a model folder (default: the fetched SmolLM2)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", default="1", help="torch threads, one run set per entry: 1 or 1,2")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--engines", default="rlf,generate,vllm", help="which of rlf, generate, vllm to run")
    parser.add_argument("--drift-rows", type=int, default=8, help="rows scored in float32 and --dtype (0: none)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    engines = set(args.engines.split(","))
    if (
        args.prompts < 1
        or args.new_tokens < 1
        or args.repeats < 1
        or min(threads) < 1
        or engines - {"rlf", "generate", "vllm"}
    ):
        parser.error("need --prompts, --new-tokens, --repeats, --threads >= 1 and --engines among rlf,generate,vllm")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = model_folder(args)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = render_prompts(tokenizer, args.prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype)).eval()
    runners = {"rlf engine": run_rlf, "transformers generate": run_generate}
    chosen = [name for name, key in (("rlf engine", "rlf"), ("transformers generate", "generate")) if key in engines]
    for name in chosen:  # warm-up: first calls, allocator, kernels
        runners[name](model, prompts[:2], 2, threads[0], pad)
    runs: dict[str, list[dict[str, Any]]] = {f"{n} [{t}]": [] for t in threads for n in chosen}
    made: dict[str, list[list[int]]] = {}
    for i in range(args.repeats):
        for t in threads:
            for name in chosen if i % 2 == 0 else chosen[::-1]:
                load = os.getloadavg()[0]
                wall, tokens = runners[name](model, prompts, args.new_tokens, t, pad)
                runs[f"{name} [{t}]"].append({"wall_s": wall, "tokens": sum(map(len, tokens)), "load": load})
                made.setdefault(name, tokens)
    results: dict[str, Any] = {}
    for key, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        results[key] = {"wall_s": wall, "tokens": rs[0]["tokens"], "tokens_per_s": rs[0]["tokens"] / wall, "runs": rs}
    vllm = (
        run_vllm(folder, args.dtype, prompts, args.new_tokens, args.repeats, threads[0])
        if "vllm" in engines
        else {"skipped": "not asked for (--engines)"}
    )
    if "walls_s" in vllm:
        wall = statistics.median(vllm["walls_s"])
        results[f"vLLM-CPU [{threads[0]}]"] = {
            "wall_s": wall,
            "tokens": vllm["tokens"],
            "tokens_per_s": vllm["tokens"] / wall,
            "loads": vllm["loads"],
        }
    exact = all(r["tokens"] == args.prompts * args.new_tokens for r in results.values())
    ratios = {}
    for t in threads:
        ours = results.get(f"rlf engine [{t}]")
        for peer in GOALS:
            theirs = results.get(f"{peer} [{t}]")
            if ours and theirs:
                ratios[f"rlf / {peer} [{t}]"] = ours["tokens_per_s"] / theirs["tokens_per_s"]
    numerics = (
        drift(folder, args.dtype, prompts[: args.drift_rows], made["rlf engine"][: args.drift_rows])
        if args.drift_rows and "rlf engine" in made and args.dtype != "float32"
        else None
    )

    print(
        f"{folder.name} in {args.dtype}: {args.prompts} prompts ({min(map(len, prompts))}-{max(map(len, prompts))} tokens) "
        f"x {args.new_tokens} new tokens, temperature 1, top-p 1, seeded; median of {args.repeats} interleaved run(s); "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'engine [threads]':<28} {'wall s':>8} {'tokens':>7} {'tokens/s':>9} {'vs generate':>12} {'load average per run':>24}"
    )
    base = {t: results.get(f"transformers generate [{t}]") for t in threads}
    for key, r in results.items():
        t = int(key.rsplit("[", 1)[1].rstrip("]"))
        ref = base.get(t)
        vs = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref else "-"
        loads = ", ".join(f"{x:.1f}" for x in ([run["load"] for run in r["runs"]] if "runs" in r else r["loads"]))
        print(f"{key:<28} {r['wall_s']:>8.2f} {r['tokens']:>7} {r['tokens_per_s']:>9.0f} {vs:>12} {loads:>24}")
    if "skipped" in vllm:
        print(f"{'vLLM-CPU':<28} not measured: {vllm['skipped']}")
    for name, ratio in ratios.items():
        peer = name.split(" / ", 1)[1].rsplit(" [", 1)[0]
        print(f"{name}: {ratio:.2f}x (goal {GOALS[peer]:.1f}x)")
    print(f"every row made {args.prompts} x {args.new_tokens} tokens: {exact}")
    if numerics:
        print(
            f"logprob drift, {args.dtype} against float32 (teacher-forced on rlf's tokens, {numerics['rows']} rows, "
            f"{numerics['tokens']} tokens): mean |Δ| {numerics['mean_abs']:.4f}, max |Δ| {numerics['max_abs']:.4f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    payload = {
        "config": config,
        "model": str(folder),
        "results": results,
        "vllm": vllm,
        "ratios": ratios,
        "drift": numerics,
        "exact_lengths": exact,
    }
    args.out.write_text(json.dumps(payload, indent=2))
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
