"""The rollout engine's KV cache and decode attention, for models whose layers all attend to everything.

On a CPU a decode step of a small model is memory traffic, not arithmetic: transformers' growing
cache concatenates every layer's keys and values at each token (a copy of the whole cache per step),
and its attention repeats the shared K/V heads of grouped-query attention for every query head (one
more copy). Here each layer's keys and values live in a buffer with room to grow, written in place
(a step copies only the new token's K/V), and attention multiplies each group of query heads with its
K/V head directly. Rows join or leave by one copy of the rows kept, left-padded to a common length.

A decode step attends over each layer's whole buffer (:func:`widen`), its free columns masked out:
a batched product over a view of the live columns only, which are not contiguous in the buffer,
makes the bfloat16 kernels copy every layer's keys and values first (SmolLM2-135M, 64 rows, 150
columns: 1.7 ms a layer against 0.3 on a whole buffer), which costs more than the masked columns.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

GROUPED_ATTENTION = "rlf_grouped"
"""The name the engine's attention is registered under with transformers' ``AttentionInterface``."""

_HEADROOM = 32
"""Free columns a buffer gets beyond what it holds, so rows decode that many tokens before it regrows."""


class SlotLayer(DynamicLayer):
    """One layer's keys and values ``[rows, kv_heads, columns, head_dim]``, rows right-aligned: ``keys`` and
    ``values`` are views of ``[:rows, :, start:end]`` of larger buffers. A step writes its token's K/V at
    ``end``; a row that leaves is replaced by the last row (one row copied); a row that joins is written
    after the last; columns no row attends to any more are dropped by moving ``start``."""

    def __init__(self) -> None:
        super().__init__()
        self._k = torch.empty(0)
        self._v = torch.empty(0)
        self.rows = self.start = self.end = 0
        self.whole = False
        """Whether the next :meth:`update` returns the whole buffer's columns (set by :func:`widen`)."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:  # noqa: ARG002 - transformers' layer API
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *_args: Any, **_kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[-2]
        if self.rows == 0:
            self._hold(key_states, key_states.shape[0], _HEADROOM, q)  # room to join wider rows
        else:
            self.reserve(q)
        self._k[: self.rows, :, self.end : self.end + q] = key_states
        self._v[: self.rows, :, self.end : self.end + q] = value_states
        self.end += q
        live = self._view()
        if self.whole:
            self.whole = False
            return self._k[: self.rows], self._v[: self.rows]
        return live

    def reserve(self, columns: int) -> None:
        """Room for ``columns`` more after the live ones (the buffer regrows if it has less)."""
        if self.end + columns > self._k.shape[-2]:
            self._hold(self._k, self.rows, 0, self.end - self.start + columns)

    def _hold(self, like: torch.Tensor, rows: int, left: int, columns: int) -> None:
        """Move the live rows into zeroed buffers of ``rows`` rows and ``left`` free columns before
        ``columns`` (and the headroom after), the live rows' columns ending at ``left + their width``."""
        k = like.new_zeros((rows, like.shape[1], left + columns + _HEADROOM, like.shape[-1]))
        v = torch.zeros_like(k)
        width = self.end - self.start
        if self.rows:
            k[: self.rows, :, left : left + width] = self._k[: self.rows, :, self.start : self.end]
            v[: self.rows, :, left : left + width] = self._v[: self.rows, :, self.start : self.end]
        else:
            self.rows = rows
        self._k, self._v, self.start, self.end = k, v, left, left + width

    def _view(self) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self._k[: self.rows, :, self.start : self.end], self._v[: self.rows, :, self.start : self.end]
        self.keys, self.values = keys, values
        return keys, values

    def fill(self, parts: list[tuple[torch.Tensor, torch.Tensor]], width: int) -> None:
        """Hold these K/V blocks (each ``[rows, kv_heads, length, head_dim]``) stacked along the rows,
        each right-aligned in ``width`` columns, zeros before it."""
        like = parts[0][0]
        self.rows = self.start = self.end = 0
        self._hold(like, sum(k.shape[0] for k, _ in parts), 0, width)
        row = 0
        for k, v in parts:
            n = k.shape[-2]
            self._k[row : row + k.shape[0], :, width - n : width] = k
            self._v[row : row + v.shape[0], :, width - n : width] = v
            row += k.shape[0]
        self.dtype, self.device, self.is_initialized = like.dtype, like.device, True
        self.end = width
        self._view()

    def join(self, other: SlotLayer) -> None:
        """Append ``other``'s rows (freshly prefilled) after these; the narrower side is left-padded."""
        width, extra = self.end - self.start, other.end - other.start
        wider = max(0, extra - width)
        rows = self.rows + other.rows
        if rows > self._k.shape[0] or wider > self.start:  # regrow: room for the rows to come and more padding
            self._hold(self._k, max(rows, 2 * self.rows), wider + _HEADROOM, width)
        self.start -= wider
        self._k[: self.rows, :, self.start : self.start + wider] = 0
        self._v[: self.rows, :, self.start : self.start + wider] = 0
        new = slice(self.rows, rows)
        self._k[new, :, self.start : self.end - extra] = 0
        self._v[new, :, self.start : self.end - extra] = 0
        keys, values = other._view()
        self._k[new, :, self.end - extra : self.end] = keys
        self._v[new, :, self.end - extra : self.end] = values
        self.rows = rows
        self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (a row may repeat: copies of one prefill), in that order."""
        self._k, self._v = self._k.index_select(0, indices), self._v.index_select(0, indices)
        self.rows = len(indices)
        self._view()

    def move_rows(self, holes: torch.Tensor, movers: torch.Tensor, rows: int, start: int) -> None:
        """Copy rows ``movers`` into rows ``holes``, keep the first ``rows``, drop ``start`` leading columns."""
        if len(holes):  # index_select/index_copy_: half the time of assigning by advanced indexing
            for buffer in (self._k, self._v):
                live = buffer[:, :, self.start : self.end]
                live.index_copy_(0, holes, live.index_select(0, movers))
        self.rows = rows
        self.start += start
        self._view()


def slot_cache(layers: int) -> Cache:
    """An empty cache of ``layers`` :class:`SlotLayer` s, for a prefill to write into."""
    return Cache(layers=[SlotLayer() for _ in range(layers)])


def prefix_cache(prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None], width: int) -> Cache:
    """A cache of the rows' kept prefixes (each layer's ``[kv_heads, length, head_dim]`` K/V, or None for
    a row without one), right-aligned in ``width`` columns."""
    known = next(p for p in prefixes if p is not None)
    layers: list[Any] = []
    for i, (k0, v0) in enumerate(known):
        parts = [
            (p[i][0][None], p[i][1][None]) if p is not None else (k0[None, :, :0], v0[None, :, :0]) for p in prefixes
        ]
        layer = SlotLayer()
        layer.fill(parts, width)
        layers.append(layer)
    return Cache(layers=layers)


def widen(cache: Cache, mask: torch.Tensor) -> torch.Tensor:
    """For a decode step: make every layer's next update return its whole buffer (room for the new
    column reserved first) and give back ``mask`` (``[rows, live columns + 1]``) widened to the
    buffer's columns, zeros at the free ones. Every layer has the same columns (the same joins,
    leaves and growth happen to each); a cache that does not is an error of this module's."""
    layers = cast("list[SlotLayer]", cache.layers)  # a cache slot_cache or prefix_cache made
    for layer in layers:
        layer.reserve(1)
        layer.whole = True
    spans = {(layer.start, layer.end, layer._k.shape[-2]) for layer in layers}
    if len(spans) != 1:
        raise RuntimeError(f"the engine's KV cache layers disagree on their columns: {sorted(spans)}")
    ((start, end, columns),) = spans
    wide = mask.new_zeros((mask.shape[0], columns))
    wide[:, start : end + 1] = mask
    return wide


def leave(rows: int, keep: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Rows ``keep`` stay (of ``rows``): the new row order (old indices), and which old rows move into
    which holes. Each row gone past the end is dropped; each gone before it is filled by a kept row from
    the end, so a leave copies one row per hole instead of all the rows kept."""
    n = len(keep)
    kept = set(keep)
    holes = [j for j in range(n) if j not in kept]
    movers = [j for j in range(n, rows) if j in kept]
    order = list(range(n))
    for h, m in zip(holes, movers, strict=True):
        order[h] = m
    return order, holes, movers


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
    module: torch.nn.Module,  # noqa: ARG001 - transformers' attention-function signature
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,  # noqa: ARG001 - passed by name; generation runs the model in eval mode, without dropout
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """Attention with an additive mask, each K/V head shared by its group of query heads without
    repeating it: ``query [B, H, Q, D]``, ``key``/``value [B, H_kv, L, D]`` → ``[B, Q, H, D]``.

    A prefill goes to torch's SDPA (``enable_gqa``), whose fused kernel never materialises the
    ``Q × L`` scores; a decode step (one query) is two batched products, one per group of heads,
    which on a CPU cost less than SDPA's setup at that size."""
    b, heads, q, d = query.shape
    if q > 1:
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2), None
    kv_heads, length = key.shape[1], key.shape[-2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else d**-0.5
    scores = torch.matmul(query.reshape(b, kv_heads, group, d), key.transpose(-1, -2)).mul_(scale)
    if attention_mask is not None:
        scores = scores.add_(attention_mask.view(b, 1, 1, length))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value).view(b, heads, 1, d)
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
