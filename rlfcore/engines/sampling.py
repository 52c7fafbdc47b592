"""The top-k/top-p (nucleus) cut, shared by the engine that samples and the trainer that weighs samples.

Asynchronous training corrects for the gap between the policy that sampled a token and the one that
trains on it; the two distributions are only comparable if both are cut the same way, so the cut
lives here once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

CUT_CANDIDATES = 64
"""The most likely tokens among which a top-k/top-p cut is looked for first."""


def cuts(top_k: int, top_p: float) -> bool:
    """Whether these settings cut the distribution at all."""
    return top_k > 0 or top_p < 1.0


def cut_probs(logp: torch.Tensor, top_k: Sequence[int], top_p: Sequence[float]) -> torch.Tensor:
    """Each row's probabilities after its top-k and top-p cut, not renormalised (``[N, V]`` from
    log-probabilities ``[N, V]``; ``top_k <= 0`` keeps every token, ``top_p >= 1`` too).

    The cut is found among the most likely tokens only (a partial sort), unless some row may keep
    more of them; then the whole vocabulary is sorted."""
    vocab = logp.shape[-1]
    ks = [k if 0 < k < vocab else vocab for k in top_k]
    probs = logp.exp()
    if all(k == vocab for k in ks) and all(p >= 1.0 for p in top_p):
        return probs
    k_t = torch.tensor(ks, device=logp.device)
    p_t = torch.tensor(list(top_p), device=logp.device)
    head, order = probs.topk(min(vocab, CUT_CANDIDATES), dim=-1)
    mass = head.cumsum(dim=-1)
    # A row's cut lies among these when it keeps at most as many, or their mass reaches its top_p.
    if not bool(((k_t <= head.shape[-1]) | (mass[:, -1] >= p_t)).all()):
        head, order = probs.sort(dim=-1, descending=True)
        mass = head.cumsum(dim=-1)
    rank = torch.arange(head.shape[-1], device=logp.device)[None, :]
    drop = rank >= k_t[:, None]
    # Keep the smallest prefix whose mass reaches top_p: a token goes when the mass before it does.
    drop |= (mass - head) >= p_t[:, None]
    drop[:, 0] = False
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, order, ~drop)
    return probs.masked_fill_(~keep, 0.0)


def cut_logprobs(logp: torch.Tensor, tokens: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Log-probability of each of ``tokens`` (``[N]``) under its row's cut and renormalised
    distribution (``logp``: ``[N, V]``): what the sampler drew it with; ``-inf`` where the cut drops it."""
    probs = cut_probs(logp, [top_k] * logp.shape[0], [top_p] * logp.shape[0])
    kept = probs.gather(1, tokens[:, None]).squeeze(1)
    return kept.log() - probs.sum(-1).log()
