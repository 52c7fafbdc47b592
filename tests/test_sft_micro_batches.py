"""SFT's micro-batches: the same length-sorted packing under a token budget as GRPO, same loss and gradient."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlfcore.backends.local import grpo  # noqa: E402
from rlfcore.backends.local.sft import micro_batches  # noqa: E402
from rlfcore.sequences import Sequence  # noqa: E402


def tiny_model():
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, intermediate_size=64, max_position_embeddings=512, pad_token_id=0,
    )  # fmt: skip
    return transformers.Qwen3ForCausalLM(config).float()


def conversations(n: int, seed: int = 0) -> list[Sequence]:
    """Prompts of 5-40 tokens, responses of 2-60 with a masked-out stretch (a tool result) in some."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [rng.randrange(1, 200) for _ in range(rng.randint(5, 40))]
        response = [rng.randrange(1, 200) for _ in range(rng.randint(2, 60))]
        mask = [0 if 0 < i < len(response) // 3 else 1 for i in range(len(response))]
        out.append(Sequence(prompt, response, mask))
    return out


def loss_and_grads(model, batches):
    model.zero_grad(set_to_none=True)
    total = float(sum(b.loss_mask.sum().item() for b in batches))
    value = 0.0
    for b in batches:
        loss = -(grpo.token_logprobs(model, b) * b.loss_mask).sum() / total
        loss.backward()
        value += loss.item()
    return value, [p.grad.clone() for p in model.parameters()]


def test_micro_batched_loss_and_gradient_equal_the_padded_batchs():
    model = tiny_model()
    seqs = conversations(24)
    whole = grpo.collate(
        [s.prompt_ids for s in seqs], [s.response_ids for s in seqs], [s.response_mask for s in seqs], 0
    )
    want, want_grads = loss_and_grads(model, [whole])
    batches = micro_batches(seqs, 0, 64, 400, torch.device("cpu"))
    assert len(batches) > 3  # the budget really split the batch
    widths = [b.input_ids.shape[1] for b in batches]
    assert widths == sorted(widths) and all(b.input_ids.numel() <= 400 or len(b.input_ids) == 1 for b in batches)
    # sorted by length: the padded tokens are far fewer than in one batch padded to the longest
    assert sum(b.input_ids.numel() for b in batches) < 0.75 * whole.input_ids.numel()
    assert sum(b.loss_mask.sum().item() for b in batches) == whole.loss_mask.sum().item()
    got, got_grads = loss_and_grads(model, batches)
    assert got == pytest.approx(want, rel=1e-5)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, atol=1e-6, rtol=1e-4)


def test_micro_batches_keep_every_conversation_once_and_respect_the_sequence_cap():
    seqs = conversations(10, seed=1)
    batches = micro_batches(seqs, 0, 3, None, torch.device("cpu"))
    assert [len(b.input_ids) for b in batches] == [3, 3, 3, 1]
    rows = sorted(
        tuple(b.input_ids[i][b.attention_mask[i].bool()].tolist()) for b in batches for i in range(len(b.input_ids))
    )
    assert rows == sorted(tuple(s.prompt_ids + s.response_ids) for s in seqs)
