"""The rollout engine's forward pass for Llama-family decoders (Llama, Qwen2, Qwen3), without the
per-call machinery of transformers' modules.

A decode step of a small model on a CPU is mostly Python: transformers' forward builds masks, output
objects and keyword plumbing around each of a few dozen small tensor operations. This one runs the
same operations, in the same order and dtypes, on the model's own parameters (so a trainer's in-place
updates are seen at the next step), and writes keys and values into the engine's
:class:`~rlfcore.engines.kvcache.SlotLayer` cache: its logits are bit-for-bit those of the model's
forward. Plain LoRA layers (peft's ``lora.Linear`` on an ``nn.Linear``, no variant such as DoRA) run
as peft runs them, ``base(x) + lora_B(lora_A(x)) * scaling`` for each active adapter, in peft's order
(dropout is off: the engine decodes in eval mode), so an adapted policy's logits are bit-for-bit
peft's too. Models it does not know, or configured beyond what it implements (scaled RoPE, other
activations, tensor-parallel slicing, quantised layers, other adapters: adapted embeddings or norms,
DoRA), and models with forward hooks go through the model's forward.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules import module as _hooks

from rlfcore.engines import kvcache

_FAMILIES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def supports(model: Any) -> bool:
    """Whether :func:`forward` computes exactly what ``model``'s own forward does."""
    if type(model).__name__ not in _FAMILIES:
        return False
    config = model.config
    inner = model.model
    rotary = getattr(inner, "rotary_emb", None)
    linears = [
        getattr(part, name)
        for layer in inner.layers
        for part, names in ((layer.self_attn, _ATTENTION), (layer.mlp, _MLP))
        for name in names
    ]
    norms = [inner.norm] + [
        norm
        for layer in inner.layers
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, *_head_norms(layer.self_attn))
    ]
    return (
        getattr(config, "hidden_act", None) == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
        and getattr(rotary, "rope_type", None) == "default"
        and kvcache.full_attention(model)
        and type(inner.embed_tokens) is torch.nn.Embedding
        and all(type(n).__name__.endswith("RMSNorm") for n in norms)  # the family's own, not an adapter's
        and all(type(m) is torch.nn.Linear or _plain_lora(m) for m in [*linears, model.lm_head])  # not quantised
    )


def _head_norms(attn: Any) -> tuple[Any, ...]:
    return (attn.q_norm, attn.k_norm) if hasattr(attn, "q_norm") else ()


def _plain_lora(module: Any) -> bool:
    """Whether ``module`` is peft's LoRA linear layer on a plain ``nn.Linear``, with no variant (DoRA
    and the like) in any adapter: then :func:`_lora` is its forward."""
    peft = sys.modules.get("peft")  # no peft imported: no peft layer here
    return (
        peft is not None
        and type(module) is peft.tuners.lora.layer.Linear
        and type(module.base_layer) is torch.nn.Linear
        and not module.lora_variant
    )


def hooked(modules: list[torch.nn.Module]) -> bool:
    """Whether a forward hook would see these modules run: then the model's own forward must run."""
    if _hooks._global_forward_hooks or _hooks._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def _rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    """transformers' RMSNorm of these families: in float32, scaled by the weight in the input's dtype."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    out: torch.Tensor = norm.weight * h.to(x.dtype)
    return out


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _linear(x: torch.Tensor, layer: Any) -> torch.Tensor:
    if type(layer) is torch.nn.Linear:
        return F.linear(x, layer.weight, layer.bias)
    return _lora(x, layer)


def _lora(x: torch.Tensor, layer: Any) -> torch.Tensor:
    """peft's ``lora.Linear.forward`` in eval mode (no dropout): the same operations in its order, its
    adapters' state (on, off, merged, which are active) read at every call as peft reads it."""
    base = layer.base_layer
    y = F.linear(x, base.weight, base.bias)
    if layer.disable_adapters or layer.merged:
        return y
    dtype = y.dtype
    for name in layer.active_adapters:
        if name not in layer.lora_A:
            continue
        a, b = layer.lora_A[name], layer.lora_B[name]
        x = layer._cast_input_dtype(x, a.weight.dtype)
        y = y + F.linear(F.linear(x, a.weight, a.bias), b.weight, b.bias) * layer.scaling[name]
    return y.to(dtype)


def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
    """The last position's logits ``[rows, vocab]`` of ``ids [rows, queries]`` at ``positions``, which
    attend to ``mask [rows, columns]`` (the cached columns, then the queries); ``cache``'s layers take
    the new keys and values."""
    inner = model.model
    rows, queries = ids.shape
    x = F.embedding(ids, inner.embed_tokens.weight, inner.embed_tokens.padding_idx)
    rotary = inner.rotary_emb
    freqs = positions[:, :, None].float() * rotary.inv_freq[None, None, :].float()
    angles = torch.cat((freqs, freqs), dim=-1)
    cos = (angles.cos() * rotary.attention_scaling).to(x.dtype)[:, None]
    sin = (angles.sin() * rotary.attention_scaling).to(x.dtype)[:, None]
    additive = kvcache.additive_mask(mask, queries, x.dtype)
    for layer, slots in zip(inner.layers, cache.layers, strict=True):
        attn = layer.self_attn
        shape = (rows, queries, -1, attn.head_dim)
        h = _rms_norm(x, layer.input_layernorm)
        q = _linear(h, attn.q_proj).view(shape)
        k = _linear(h, attn.k_proj).view(shape)
        if hasattr(attn, "q_norm"):  # Qwen3 normalises each head's queries and keys
            q, k = _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)
        v = _linear(h, attn.v_proj).view(shape).transpose(1, 2)
        q, k = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin)
        k, v = slots.update(k, v)
        out, _ = kvcache.grouped_attention(attn, q, k, v, additive, attn.scaling)
        x = x + _linear(out.reshape(rows, queries, -1), attn.o_proj)
        mlp = layer.mlp
        h = _rms_norm(x, layer.post_attention_layernorm)
        x = x + _linear(F.silu(_linear(h, mlp.gate_proj)) * _linear(h, mlp.up_proj), mlp.down_proj)
    # the last position sliced as the model slices it: a product's blocking follows its input's layout
    return _linear(_rms_norm(x, inner.norm)[:, -1:], model.lm_head)[:, 0]
