"""Supervised warm start on multi-turn conversations, loss on the assistant's tokens only.

Conversations are tokenised by :class:`~rlfcore.sequences.SequenceBuilder`, the same code that builds
RL sequences, so the model learns exactly the token layout it will generate in rollouts.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlfcore.backends.local import grpo
from rlfcore.backends.local.local import autocast, schedule
from rlfcore.backends.local.rundir import RunDir
from rlfcore.chat import HFChatTokenizer
from rlfcore.runtime import Runtime
from rlfcore.sequences import Sequence, SequenceBuilder


def read_conversations(path: Path, runtime: Runtime, tok: HFChatTokenizer) -> list[Sequence]:
    """JSONL rows with ``messages`` (and optionally ``env``): token sequences with loss masks.

    The tools of the row's environment are rendered into the prompt, as in rollouts.
    """
    builder = SequenceBuilder(tok)
    out = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            messages = row.get("messages")
            if not isinstance(messages, list):
                raise ValueError(f"{path}:{n}: an SFT row needs 'messages', a list of chat messages")
            env = runtime.env_of({"env": row.get("env"), "id": row.get("id", n)})
            tools = [t.schema() for t in runtime.tools_for(env).values()] or None
            out.append(builder.conversation(messages, tools))
    if not out:
        raise ValueError(f"{path}: no conversations")
    return out


def train_sft(
    model: Any,
    hf_tokenizer: Any,
    runtime: Runtime,
    data: Path,
    run_dir: RunDir,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Cross-entropy on assistant tokens for ``sft.steps`` steps of ``sft.batch_size`` conversations."""
    cfg = runtime.config.sft
    tok = HFChatTokenizer(hf_tokenizer, runtime.config.model.chat_template_kwargs)
    sequences = read_conversations(data, runtime, tok)
    device = next(model.parameters()).device
    pad = hf_tokenizer.pad_token_id if hf_tokenizer.pad_token_id is not None else tok.eos_token_ids[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule("constant", cfg.warmup_steps, cfg.steps))
    rng = random.Random(f"sft/{runtime.config.seed}")
    micro_seqs, micro_tokens = runtime.config.trainer.micro_batch_size, runtime.config.trainer.micro_batch_tokens
    model.train()
    history = []
    for step in range(1, cfg.steps + 1):
        t0 = time.perf_counter()
        batch_seqs = [sequences[rng.randrange(len(sequences))] for _ in range(cfg.batch_size)]
        batches = micro_batches(batch_seqs, pad, micro_seqs, micro_tokens, device)
        total = float(sum(b.loss_mask.sum().item() for b in batches))
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for b in batches:  # gradients accumulate: the step's loss is the mean over all its tokens
            with autocast(device, runtime.config.trainer.bf16):
                logp = grpo.token_logprobs(model, b)
            loss = -(logp * b.loss_mask).sum() / max(total, 1.0)
            loss.backward()
            loss_sum += loss.item()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), runtime.config.trainer.max_grad_norm))
        optimizer.step()
        scheduler.step()
        token_acc = _token_accuracy(model, batches) if step % 50 == 0 or step == cfg.steps else None
        metrics = {
            "step": step,
            "loss": loss_sum,
            "grad_norm": norm,
            "lr": scheduler.get_last_lr()[0],
            "step_s": time.perf_counter() - t0,
        }
        if token_acc is not None:
            metrics["token_accuracy"] = token_acc
        run_dir.log(metrics, "sft_metrics.jsonl")
        history.append(metrics)
        if on_step is not None:
            on_step(metrics)
    return history


def micro_batches(
    seqs: list[Sequence], pad: int, max_seqs: int, max_tokens: int | None, device: torch.device
) -> list[grpo.Batch]:
    """The step's conversations as GRPO's micro-batches (:func:`grpo.pack`): sorted by length, at most
    ``max_seqs`` a batch and ``max_tokens`` once padded, so a batch pads only to its own longest."""
    chunks = grpo.pack([len(s.prompt_ids) + len(s.response_ids) for s in seqs], range(len(seqs)), max_seqs, max_tokens)
    out = []
    for chunk in chunks:
        b = grpo.collate(
            [seqs[i].prompt_ids for i in chunk],
            [seqs[i].response_ids for i in chunk],
            [seqs[i].response_mask for i in chunk],
            pad,
        )
        out.append(grpo.Batch(b.input_ids.to(device), b.attention_mask.to(device), b.loss_mask.to(device)))
    return out


@torch.no_grad()
def _token_accuracy(model: Any, batches: list[grpo.Batch]) -> float:
    hits = tokens = 0.0
    for b in batches:
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1]
        hits += ((logits.argmax(-1) == b.input_ids[:, 1:]).float() * b.loss_mask).sum().item()
        tokens += b.loss_mask.sum().item()
    return hits / max(tokens, 1.0)


def mean_loss(history: list[dict[str, Any]], last: int = 20) -> float:
    return statistics.fmean(m["loss"] for m in history[-last:]) if history else float("nan")
