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

from rlfcore.backends.local import grpo, lora
from rlfcore.backends.local.local import autocast, schedule
from rlfcore.backends.local.rundir import RunDir
from rlfcore.chat import HFChatTokenizer
from rlfcore.runtime import Runtime
from rlfcore.sequences import Sequence, SequenceBuilder


def read_conversations(path: Path, runtime: Runtime, tok: HFChatTokenizer) -> list[Sequence]:
    """JSONL rows with ``messages`` (and optionally ``env`` and ``tools``): token sequences with loss masks.

    The prompt renders the row's own ``tools``, else ``sft.tools``, else the tools of the row's
    environment, as rollouts render them.
    """
    builder = SequenceBuilder(tok)
    shared = sft_tools(runtime)
    out = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            messages = row.get("messages")
            if not isinstance(messages, list):
                raise ValueError(f"{path}:{n}: an SFT row needs 'messages', a list of chat messages")
            tools = row.get("tools") or shared
            if tools is None:
                env = runtime.env_of({"env": row.get("env"), "id": row.get("id", n)})
                tools = [t.schema() for t in runtime.tools_for(env).values()] or None
            elif not isinstance(tools, list):
                raise ValueError(f"{path}:{n}: 'tools' must be a list of tool schemas")
            out.append(builder.conversation(messages, tools))
    if not out:
        raise ValueError(f"{path}: no conversations")
    return out


def sft_tools(runtime: Runtime) -> list[dict[str, Any]] | None:
    """The tool schemas of ``sft.tools``, or None when it is not set."""
    name = runtime.config.sft.tools
    if name is None:
        return None
    path = runtime.config.path(name)
    try:
        tools = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"sft.tools: cannot read {path}: {exc}") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"sft.tools: {path} must hold a JSON list of tool schemas")
    return tools


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
    params = lora.trainable(model)  # with LoRA, the adapters only
    optimizer = torch.optim.AdamW(params, lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(cfg.lr_schedule, cfg.warmup_steps, cfg.steps))
    rng = random.Random(f"sft/{runtime.config.seed}")
    model.train()
    history = []
    for step in range(1, cfg.steps + 1):
        t0 = time.perf_counter()
        batch_seqs = [sequences[rng.randrange(len(sequences))] for _ in range(cfg.batch_size)]
        # Conversations start alike (the system prompt with its tool list is most of a short one):
        # the shared start is computed once per batch.
        b = grpo.collate(
            [s.prompt_ids for s in batch_seqs],
            [s.response_ids for s in batch_seqs],
            [s.response_mask for s in batch_seqs],
            pad,
            share_prefix=True,
        ).to(device)
        with autocast(device, runtime.config.trainer.bf16):
            logp = grpo.token_logprobs(model, b)
        loss = -(logp * b.loss_mask).sum() / b.loss_mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(params, runtime.config.trainer.max_grad_norm))
        lr = scheduler.get_last_lr()[0]  # the rate this step used, as GRPO's metrics log it
        optimizer.step()
        scheduler.step()
        token_acc = _token_accuracy(model, batch_seqs, pad, device) if step % 50 == 0 or step == cfg.steps else None
        metrics = {
            "step": step,
            "loss": loss.item(),
            "grad_norm": norm,
            "lr": lr,
            "step_s": time.perf_counter() - t0,
        }
        if token_acc is not None:
            metrics["token_accuracy"] = token_acc
        run_dir.log(metrics, "sft_metrics.jsonl")
        history.append(metrics)
        if on_step is not None:
            on_step(metrics)
    return history


@torch.no_grad()
def _token_accuracy(model: Any, seqs: list[Sequence], pad: int, device: torch.device) -> float:
    b = grpo.collate([s.prompt_ids for s in seqs], [s.response_ids for s in seqs], [s.response_mask for s in seqs], pad)
    ids, mask = b.input_ids.to(device), b.loss_mask.to(device)
    logits = model(input_ids=ids, attention_mask=b.attention_mask.to(device)).logits[:, :-1]
    hits = (logits.argmax(-1) == ids[:, 1:]).float() * mask
    accuracy: float = (hits.sum() / mask.sum().clamp(min=1)).item()
    return accuracy


def mean_loss(history: list[dict[str, Any]], last: int = 20) -> float:
    return statistics.fmean(m["loss"] for m in history[-last:]) if history else float("nan")
