"""The rollout engine's KV cache and decode attention, for models whose layers all attend to everything.

On a CPU a decode step of a small model is memory traffic, not arithmetic: transformers' growing
cache concatenates every layer's keys and values at each token (a copy of the whole cache per step),
and its attention repeats the shared K/V heads of grouped-query attention for every query head (one
more copy). Here each layer's keys and values live in a buffer with room to grow, written in place
(a step copies only the new token's K/V), and attention multiplies each group of query heads with its
K/V head directly. Rows join or leave by one copy of the rows kept, left-padded to a common length.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

GROUPED_ATTENTION = "rlf_grouped"
"""The name the engine's attention is registered under with transformers' ``AttentionInterface``."""

_HEADROOM = 64
"""Free columns a buffer gets beyond what it holds, so a row decodes that many tokens before it regrows."""


class SlotLayer(DynamicLayer):
    """One layer's keys and values ``[rows, kv_heads, columns, head_dim]``: ``keys``/``values`` are views
    of the first ``columns`` of a larger buffer, which ``update`` writes into without copying the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._k = torch.empty(0)
        self._v = torch.empty(0)
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, q = self.length, key_states.shape[-2]
        if n == 0 or n + q > self._k.shape[-2]:
            self._hold(key_states.shape[0], n + q, key_states)
        self._k[:, :, n : n + q] = key_states
        self._v[:, :, n : n + q] = value_states
        self._view(n + q)
        return self.keys, self.values

    def _hold(self, rows: int, need: int, like: torch.Tensor) -> None:
        """Move into a buffer of ``rows`` with room for ``need`` columns and the headroom."""
        k = like.new_zeros((rows, like.shape[1], need + _HEADROOM, like.shape[-1]))
        v = torch.zeros_like(k)
        if self.length:
            k[:, :, : self.length] = self._k[:, :, : self.length]
            v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = k, v

    def _view(self, length: int) -> None:
        self.length = length
        self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]

    def fill(self, parts: list[tuple[torch.Tensor, torch.Tensor]], width: int) -> None:
        """Hold these K/V blocks (each ``[rows, kv_heads, length, head_dim]``) stacked along the rows,
        each right-aligned in ``width`` columns, zeros before it."""
        like = parts[0][0]
        rows = sum(k.shape[0] for k, _ in parts)
        self._k = like.new_zeros((rows, like.shape[1], width + _HEADROOM, like.shape[-1]))
        self._v = torch.zeros_like(self._k)
        row = 0
        for k, v in parts:
            n = k.shape[-2]
            self._k[row : row + k.shape[0], :, width - n : width] = k
            self._v[row : row + v.shape[0], :, width - n : width] = v
            row += k.shape[0]
        self.dtype, self.device, self.is_initialized = like.dtype, like.device, True
        self._view(width)

    def keep(self, index: torch.Tensor, start: int) -> None:
        """Keep the rows ``index`` and the columns from ``start`` on, in a fresh buffer."""
        k, v = self.keys[index, :, start:], self.values[index, :, start:]
        self.length = 0
        self.fill([(k, v)], k.shape[-2])

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep(indices, 0)


def slot_cache(layers: int) -> Cache:
    """An empty cache of ``layers`` :class:`SlotLayer` s, for a prefill to write into."""
    return Cache(layers=[SlotLayer() for _ in range(layers)])


def prefix_cache(prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None], width: int) -> Cache:
    """A cache of the rows' kept prefixes (each layer's ``[kv_heads, length, head_dim]`` K/V, or None for
    a row without one), right-aligned in ``width`` columns."""
    known = next(p for p in prefixes if p is not None)
    cache = slot_cache(len(known))
    for i, layer in enumerate(cache.layers):
        k0, v0 = known[i]
        parts = [
            (p[i][0][None], p[i][1][None]) if p is not None else (k0[None, :, :0], v0[None, :, :0]) for p in prefixes
        ]
        layer.fill(parts, width)
    return cache


def merge_caches(a: Cache, b: Cache, width: int) -> None:
    """Append ``b``'s rows to ``a``'s, both right-aligned in ``width`` columns."""
    for la, lb in zip(a.layers, b.layers, strict=True):
        la.fill([(la.keys, la.values), (lb.keys, lb.values)], width)


def additive_mask(mask: torch.Tensor, queries: int, dtype: torch.dtype) -> torch.Tensor:
    """The 4D mask ``[rows, 1, queries, columns]`` of a 2D padding mask whose last ``queries`` columns
    are the tokens being fed: 0 where a query may attend, the dtype's minimum elsewhere (a pad query
    that sees nothing attends uniformly, as transformers' eager mask does, instead of making NaNs)."""
    columns = mask.shape[1]
    allowed = mask.bool()[:, None, None, :]
    if queries > 1:
        col = torch.arange(columns, device=mask.device)
        row = torch.arange(columns - queries, columns, device=mask.device)
        allowed = allowed & (col[None, :] <= row[:, None])[None, None]
    out = torch.zeros(allowed.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~allowed, torch.finfo(dtype).min)


def grouped_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Softmax attention with an additive mask, each K/V head shared by its group of query heads without
    repeating it: ``query [B, H, Q, D]``, ``key``/``value [B, H_kv, L, D]`` → ``[B, Q, H, D]``."""
    b, heads, q, d = query.shape
    kv_heads, length = key.shape[1], key.shape[-2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else d**-0.5
    grouped = query.reshape(b, kv_heads, group * q, d)
    scores = torch.matmul(grouped, key.transpose(-1, -2)).mul_(scale)
    if attention_mask is not None:
        scores = scores.view(b, kv_heads, group, q, length).add_(attention_mask[:, :, None]).view_as(scores)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value).view(b, heads, q, d)
    return out.transpose(1, 2), None


def register() -> None:
    """Make :func:`grouped_attention` selectable as ``config._attn_implementation = GROUPED_ATTENTION``."""
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)


def full_attention(model: Any) -> bool:
    """Whether every layer of ``model`` attends to the whole sequence (no sliding window, no linear
    attention): the layers a :class:`SlotLayer` cache and :func:`grouped_attention` serve."""
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    return getattr(config, "sliding_window", None) is None and getattr(config, "attention_chunk_size", None) is None
