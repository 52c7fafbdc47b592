"""The local trainer's update step against a bare torch GRPO step on the same batch.

Both take the same tiny Qwen3 model (built here), the same trajectories (random prompts and
responses with a loss mask and group rewards) and do the same maths: group advantages, logprobs of
the generated tokens, the PPO-clip loss, backward, clip, AdamW. The bare step is the least code that
does it; the ratio is what rlf's bookkeeping (micro-batching, metrics, drift check) costs.

    python benchmarks/trainer_overhead.py [--groups 8 --n 8 --prompt 64 --response 48 --repeats 5]

Prints a table and writes JSON to benchmarks/results/trainer_overhead.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch


def make_trajectories(groups: int, n: int, prompt: int, response: int, vocab: int, seed: int) -> list:
    from rlfcore.loop import Trajectory

    rng = random.Random(seed)
    out = []
    for g in range(groups):
        prompt_ids = [rng.randrange(10, vocab) for _ in range(prompt)]
        for k in range(n):
            length = rng.randint(response // 2, response)
            mask = [1 if (i // 8) % 2 == 0 else 0 for i in range(length)]  # turns of generated and observed tokens
            out.append(
                Trajectory(
                    id=f"g{g}#{k}",
                    row_id=f"g{g}",
                    env=None,
                    messages=[],
                    prompt_ids=prompt_ids,
                    response_ids=[rng.randrange(10, vocab) for _ in range(length)],
                    response_mask=mask,
                    logprobs=[-1.0] * length,
                    reward=float(rng.random() < 0.5),
                )
            )
    return out


def bare_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trajectories: list, pad: int) -> None:
    """GRPO in as few lines as torch allows: one padded batch, one forward, one backward."""
    rewards: dict[str, list[float]] = {}
    for t in trajectories:
        rewards.setdefault(t.row_id, []).append(t.reward)
    adv = []
    for t in trajectories:
        r = torch.tensor(rewards[t.row_id])
        adv.append((t.reward - r.mean().item()) / (r.std().item() + 1e-6))
    width = max(len(t.prompt_ids) + len(t.response_ids) for t in trajectories)
    ids = torch.full((len(trajectories), width), pad)
    attn = torch.zeros_like(ids)
    mask = torch.zeros(len(trajectories), width - 1)
    for b, t in enumerate(trajectories):
        seq = t.prompt_ids + t.response_ids
        ids[b, : len(seq)] = torch.tensor(seq)
        attn[b, : len(seq)] = 1
        mask[b, len(t.prompt_ids) - 1 : len(seq) - 1] = torch.tensor(t.response_mask, dtype=torch.float)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - logp.detach())
    a = torch.tensor(adv).unsqueeze(-1)
    loss = (torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2)) * mask).sum() / mask.sum()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "trainer_overhead.json")
    args = parser.parse_args(argv)

    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import load_policy
    from rlfcore.backends.local.rundir import RunDir
    from rlfcore.config import load_config
    from rlfcore.runtime import Runtime
    from rlfcore.tinymodel import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        texts = [
            "What is 12+30? 42",
            '<tool_call>{"name": "calculate", "arguments": {"expression": "12+30"}}</tool_call>',
        ] * 50
        path = build_tiny(
            texts,
            Path(tmp) / "model",
            vocab_size=400,
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=3 * args.hidden,
        )
        config, manager = load_config({"trainer": {"micro_batch_size": args.groups * args.n}})
        runtime = Runtime.open(config, manager)  # the run's one loop, as rlf train builds it
        model, tok = load_policy(path, "cpu")
        trajectories = make_trajectories(
            args.groups, args.n, args.prompt, args.response, model.config.vocab_size, seed=0
        )
        trainer = LocalTrainer(runtime, model, tok, [], RunDir(Path(tmp) / "run"))
        bare_model, _ = load_policy(path, "cpu")
        bare_opt = torch.optim.AdamW(bare_model.parameters(), lr=1e-4)
        pad = tok.pad_token_id or 0

        rlf_times, bare_times = [], []
        trainer._update(trajectories)  # warm-up both
        bare_step(bare_model, bare_opt, trajectories, pad)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            trainer._update(trajectories)
            rlf_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            bare_step(bare_model, bare_opt, trajectories, pad)
            bare_times.append(time.perf_counter() - t0)
        runtime.close()
    tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in trajectories)
    result = {
        "sequences": len(trajectories),
        "tokens": tokens,
        "parameters": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "rlf_update_s": statistics.median(rlf_times),
        "bare_torch_s": statistics.median(bare_times),
        "overhead_ratio": statistics.median(rlf_times) / statistics.median(bare_times),
    }
    print(f"{'':24}{'median s':>10}")
    print(f"{'rlf LocalTrainer update':24}{result['rlf_update_s']:>10.3f}")
    print(f"{'bare torch GRPO step':24}{result['bare_torch_s']:>10.3f}")
    print(
        f"overhead ratio {result['overhead_ratio']:.2f}  ({result['sequences']} sequences, {tokens} tokens, "
        f"{result['parameters']:,} parameters, {result['threads']} threads)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
