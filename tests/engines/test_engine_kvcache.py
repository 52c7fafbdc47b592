"""The engine's KV cache and decode attention (rlfcore.engines.kvcache) against plain references:
attention with repeated K/V heads (transformers' eager path), and K/V padded and concatenated by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlfcore.engines import kvcache  # noqa: E402


def eager_reference(query, key, value, mask4d, scaling):
    """Attention as transformers' eager path computes it: each K/V head repeated for its query heads."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    probs = torch.softmax(query @ key.transpose(-1, -2) * scaling + mask4d, dim=-1)
    return (probs @ value).transpose(1, 2)


@pytest.mark.parametrize("queries", [1, 5])
def test_grouped_attention_equals_eager_attention_with_repeated_heads(queries):
    torch.manual_seed(0)
    rows, heads, kv_heads, length, dim = 3, 8, 2, 11, 4
    query = torch.randn(rows, heads, queries, dim)
    buffer = torch.randn(rows, kv_heads, length + 7, dim)  # a strided view, as the cache hands it over
    key, value = buffer[:, :, :length], torch.randn(rows, kv_heads, length, dim)
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, :4] = 0  # left padding
    mask[2, :9] = 0  # a row whose pad queries see nothing (prefill): uniform, not NaN
    mask4d = kvcache.additive_mask(mask, queries, torch.float32)
    got, _ = kvcache.grouped_attention(torch.nn.Module(), query, key, value, mask4d, scaling=0.5)
    want = eager_reference(query, key, value, mask4d, 0.5)
    assert got.shape == (rows, queries, heads, dim)
    assert not got.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_additive_mask_is_causal_over_the_fed_columns_and_hides_pads():
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    m = kvcache.additive_mask(mask, 2, torch.float32)
    allowed = (m == 0).squeeze(1).tolist()
    assert allowed[0] == [[False, True, True, False], [False, True, True, True]]
    assert allowed[1] == [[True, True, True, False], [True, True, True, True]]


def test_leave_fills_holes_from_the_end_and_keeps_every_kept_row_once():
    order, holes, movers = kvcache.leave(6, [0, 2, 4, 5])
    assert sorted(order) == [0, 2, 4, 5]
    assert holes == [1, 3] and movers == [4, 5] and order == [0, 4, 2, 5]
    assert kvcache.leave(3, [0, 1]) == ([0, 1], [], [])  # the last row leaves: nothing moves
    assert kvcache.leave(2, []) == ([], [], [])


def _kv(rows, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, length, 3, generator=g), torch.randn(rows, 2, length, 3, generator=g)


def _padded(k, width):
    return torch.cat([k.new_zeros((*k.shape[:2], width - k.shape[2], k.shape[3])), k], dim=2)


def test_slot_layer_grows_joins_and_leaves_like_padded_concatenation():
    """A layer taken through decode steps past its headroom, a join of wider and of narrower rows and
    leaves, against the same K/V kept as plain tensors: the rows it attends to must be equal."""
    layer = kvcache.SlotLayer()
    k, v = _kv(2, 5, 0)
    layer.update(k, v)
    ref_k, ref_v = k, v
    for step in range(70):  # beyond the headroom: the buffer regrows
        k1, v1 = _kv(2, 1, 100 + step)
        keys, values = layer.update(k1, v1)
        ref_k, ref_v = torch.cat([ref_k, k1], 2), torch.cat([ref_v, v1], 2)
    torch.testing.assert_close(keys, ref_k, rtol=0, atol=0)
    for rows, length, seed in [(3, 90, 1), (1, 4, 2)]:  # wider than the batch, then narrower
        other = kvcache.SlotLayer()
        nk, nv = _kv(rows, length, seed)
        other.update(nk, nv)
        layer.join(other)
        width = max(ref_k.shape[2], length)
        ref_k = torch.cat([_padded(ref_k, width), _padded(nk, width)])
        ref_v = torch.cat([_padded(ref_v, width), _padded(nv, width)])
        torch.testing.assert_close(layer.keys, ref_k, rtol=0, atol=0)
        torch.testing.assert_close(layer.values, ref_v, rtol=0, atol=0)
    keep = [1, 3, 5]
    order, holes, movers = kvcache.leave(layer.rows, keep)
    layer.move_rows(torch.tensor(holes), torch.tensor(movers), len(order), 2)
    torch.testing.assert_close(layer.keys, ref_k[order][:, :, 2:], rtol=0, atol=0)
    k1, v1 = _kv(3, 1, 7)
    keys, values = layer.update(k1, v1)
    torch.testing.assert_close(values, torch.cat([ref_v[order][:, :, 2:], v1], 2), rtol=0, atol=0)
    assert layer.get_seq_length() == ref_k.shape[2] - 2 + 1


def test_prefix_cache_right_aligns_each_rows_prefix():
    a = [(torch.ones(2, 3, 4), torch.ones(2, 3, 4))]
    cache = kvcache.prefix_cache([a, None], 5)
    keys = cache.layers[0].keys
    assert keys.shape == (2, 2, 5, 4)
    assert keys[0, :, 2:].eq(1).all() and keys[0, :, :2].eq(0).all() and keys[1].eq(0).all()


def test_full_attention_tells_sliding_window_models_apart():
    from types import SimpleNamespace

    from transformers import Qwen3Config

    def tiny(**kw):
        config = Qwen3Config(
            vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, **kw
        )
        return SimpleNamespace(config=config)  # the model's config is all it reads

    assert kvcache.full_attention(tiny())
    assert not kvcache.full_attention(tiny(use_sliding_window=True, sliding_window=4, max_window_layers=1))
