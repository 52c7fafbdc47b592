"""The shared-prefix forward of SFT and the GRPO update: the common start of a batch's rows is computed
once, and the logprobs, loss and gradients are those of one padded batch of whole rows (a real Qwen3
model, random weights)."""

from __future__ import annotations

import random

import pytest
import torch

from rlfcore.backends.local import grpo
from rlfcore.sequences import Sequence


def _model() -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, head_dim=8, max_position_embeddings=128,
    )  # fmt: skip
    return Qwen3ForCausalLM(config).train()


def _batch(prefix: list[int], n: int = 6) -> list[Sequence]:
    """Rows that start with ``prefix``, then a prompt tail and a two-turn response of their own lengths."""
    rng = random.Random(1)
    rows = []
    for _ in range(n):
        tail = [rng.randrange(1, 64) for _ in range(rng.randint(1, 5))]
        turns = [rng.randrange(1, 64) for _ in range(rng.randint(2, 12))]
        mask = [1] * (len(turns) // 2) + [0] * 2 + [1] * (len(turns) - len(turns) // 2 - 2)
        rows.append(Sequence(prefix + tail, turns, mask[: len(turns)]))
    return rows


def _plain(model: torch.nn.Module, seqs: list[Sequence]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    b = _collate(seqs)
    loss = -(grpo.token_logprobs(model, b) * b.loss_mask).sum() / b.loss_mask.sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _prefix(seqs: list[Sequence]) -> int:
    return grpo.common_prefix([s.prompt_ids for s in seqs])


def _collate(seqs: list[Sequence], share_prefix: bool = False) -> grpo.Batch:
    return grpo.collate(
        [s.prompt_ids for s in seqs], [s.response_ids for s in seqs], [s.response_mask for s in seqs], 0, share_prefix
    )


def _shared(model: torch.nn.Module, seqs: list[Sequence]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    b = _collate(seqs, share_prefix=True)
    assert b.shared == _prefix(seqs)
    logp = grpo.token_logprobs(model, b)
    loss = -(logp * b.loss_mask).sum() / b.loss_mask.sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("prefix_len", [0, 1, 20])
def test_the_shared_prefix_forward_gives_the_padded_batchs_loss_and_gradients(prefix_len):
    model = _model()
    seqs = _batch(list(range(3, 3 + prefix_len)))
    assert _prefix(seqs) >= prefix_len
    plain_loss, plain_grads = _plain(model, seqs)
    shared_loss, shared_grads = _shared(model, seqs)
    assert torch.allclose(plain_loss, shared_loss, rtol=0, atol=1e-5)
    for p, s in zip(plain_grads, shared_grads):
        assert torch.allclose(p, s, rtol=1e-4, atol=1e-6)
    # and the check can fail: a different batch gives a different loss
    assert not torch.allclose(_shared(model, seqs[:3])[0], shared_loss, atol=1e-4)


def test_the_prefix_stops_before_the_shortest_prompts_last_token():
    """Every scored prediction must come from a row's own part: the prefix never reaches the token that
    predicts the first response token, even when one row's whole prompt is the others' start."""
    seqs = [Sequence([5, 6, 7, 8], [9, 9], [1, 1]), Sequence([5, 6, 7], [4], [1]), Sequence([5, 6, 7, 8, 2], [1], [1])]
    assert _prefix(seqs) == 2
    assert _prefix([Sequence([5, 6], [1], [1]), Sequence([6, 6], [1], [1])]) == 0
    assert _prefix([Sequence([5, 6, 7], [1], [1])]) == 2


def test_the_update_places_logprobs_and_advantages_alike_with_and_without_the_prefix():
    """What the GRPO update reads off a batch: the logprob and the advantage of every generated token,
    at temperature 0.7, the same whether the prefix is shared or not."""
    model = _model().eval()
    seqs = _batch(list(range(3, 23)))
    values = [[float(k + 1)] * len(s.response_ids) for k, s in enumerate(seqs)]
    prompts = [s.prompt_ids for s in seqs]
    out = []
    for share in (False, True):
        b = _collate(seqs, share)
        with torch.no_grad():
            logp = grpo.token_logprobs(model, b, temperature=0.7)
        adv = grpo.response_tensor(prompts, values, b.loss_mask, b.shared)
        mask = b.loss_mask.bool()
        out.append((logp[mask], adv[mask], b.shared))
    (plain_logp, plain_adv, none), (shared_logp, shared_adv, shared) = out
    assert none == 0 and shared >= 20
    assert torch.allclose(plain_logp, shared_logp, atol=1e-5) and torch.equal(plain_adv, shared_adv)
    assert sorted(set(plain_adv.tolist())) == [float(k + 1) for k in range(len(seqs))]


def test_the_drift_check_reads_each_token_after_the_shared_prefix():
    """The trainer's engine-drift metric compares the engine's logprob of every generated token with the
    update's forward pass; with the prefix cut from the rows, it must still read the same positions."""
    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.loop import Trajectory

    model = _model().eval()
    seqs = _batch(list(range(3, 23)))
    plain = _collate(seqs)
    with torch.no_grad():
        full = grpo.token_logprobs(model, plain)
    trajectories = []
    for k, s in enumerate(seqs):
        start = len(s.prompt_ids) - 1
        engine = [full[k, start + j].item() for j in range(len(s.response_ids))]  # what an exact engine reports
        trajectories.append(Trajectory(f"r#{k}", "r", None, [], s.prompt_ids, s.response_ids, s.response_mask, engine))
    shared = _collate(seqs, share_prefix=True)
    assert shared.shared >= 20
    with torch.no_grad():
        logp = grpo.token_logprobs(model, shared)
    rows = [list(range(len(seqs)))]
    assert LocalTrainer._engine_drift(trajectories, rows, [shared], [logp]) < 1e-6
    shifted = [
        Trajectory(t.id, t.row_id, None, [], t.prompt_ids, t.response_ids, t.response_mask, t.logprobs[1:] + [0.0])
        for t in trajectories
    ]
    assert LocalTrainer._engine_drift(shifted, rows, [shared], [logp]) > 1e-2  # and it sees a misplaced token
