"""The engine's own forward pass for Llama-family decoders: bit-for-bit the logits of the model's
forward (tiny random Llama, Qwen2 with its q/k/v biases, Qwen3 with its q/k norms), and the engine
makes the same tokens and logprobs with it as without it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlfcore.engines import decoder  # noqa: E402
from rlfcore.engines.base import SamplingParams  # noqa: E402
from rlfcore.engines.transformers import TransformersEngine  # noqa: E402

SIZES = {
    "vocab_size": 300,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {}),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, {"head_dim": 8}),
}
PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13, 14, 15], [100], [3, 250, 31, 4, 1]]


def build(family: str, **overrides: Any) -> Any:
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    model = model_cls(config_cls(**{**SIZES, **extra, **overrides})).float().eval()
    with torch.no_grad():  # random biases (zero at init) and sharper logits: a wrong term shows
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
        model.lm_head.weight.mul_(25)
    return model


def test_it_knows_the_families_and_leaves_other_configurations_to_the_model():
    for family in FAMILIES:
        assert decoder.supports(build(family))
    assert build("qwen2").model.layers[0].self_attn.q_proj.bias is not None  # the biases are exercised
    assert not decoder.supports(build("llama", rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert not decoder.supports(build("llama", hidden_act="gelu"))
    assert not decoder.supports(build("qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=1))

    class Adapted(torch.nn.Linear):  # as a quantised or LoRA layer would be: its forward is not F.linear
        pass

    adapted = build("qwen3")
    adapted.model.layers[1].mlp.down_proj = Adapted(64, 32, bias=False)
    assert not decoder.supports(adapted)


async def test_a_forward_hook_on_the_model_sends_forward_passes_through_the_model():
    model = build("qwen3")
    engine = TransformersEngine(model, max_batch_size=8)
    seen: list[int] = []
    handle = model.model.layers[0].mlp.register_forward_hook(lambda *_: seen.append(1))
    try:
        gen = await engine.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=4))
    finally:
        handle.remove()
    assert len(gen.token_ids) == 4 and len(seen) == 4  # one prefill, three decode steps, each hooked
    await engine.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=4))
    assert len(seen) == 4  # without the hook, the engine's own forward again


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_are_bit_for_bit_the_models_at_a_padded_prefill_and_each_decode_step(family):
    model = build(family)
    engine = TransformersEngine(model, max_batch_size=8)
    assert engine._own_forward
    width = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in PROMPTS])[:, None]).long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    results = []
    for own in (True, False):
        engine._own_forward = own
        m, pos, cache, steps = mask, positions, None, []
        with torch.no_grad():
            logits, cache = engine._forward(ids, m, pos, cache)
            steps.append(logits)
            for _ in range(5):
                tokens = logits.argmax(-1)
                m = torch.cat([m, m.new_ones((len(PROMPTS), 1))], dim=1)
                pos = pos[:, -1:] + 1
                logits, cache = engine._forward(tokens[:, None], m, pos, cache)
                steps.append(logits)
        results.append(steps)
    own, theirs = results
    assert len({tuple(step.argmax(-1).tolist()) for step in theirs}) > 1  # the steps do differ
    for a, b in zip(own, theirs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("family", sorted(FAMILIES))
async def test_the_engine_makes_the_same_tokens_and_logprobs_with_it(family):
    model = build(family)
    params = [SamplingParams(temperature=0.9, max_tokens=10, seed=k) for k in range(len(PROMPTS))]
    runs = []
    for own in (True, False):
        engine = TransformersEngine(model, max_batch_size=8)
        engine._own_forward = own
        gens = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(PROMPTS, params)))
        runs.append([(g.token_ids, g.logprobs) for g in gens])
        await engine.close()
    assert runs[0] == runs[1]


def _adapted(family: str, **lora: Any) -> Any:
    """``build(family)`` with peft LoRA adapters (random, so they change the logits), and the peft model."""
    peft = pytest.importorskip("peft")
    settings = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                "up_proj", "down_proj", "lm_head"], "lora_dropout": 0.1, "task_type": "CAUSAL_LM", **lora}  # fmt: skip
    wrapped = peft.get_peft_model(build(family), peft.LoraConfig(**settings))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return wrapped.get_base_model(), wrapped


def _steps(engine: TransformersEngine, own: bool) -> list[torch.Tensor]:
    """The logits of a padded prefill of PROMPTS and five greedy decode steps, through ``engine``."""
    engine._own_forward = own
    width = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in PROMPTS])[:, None]).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    steps, cache = [], None
    engine.model.eval()
    with torch.no_grad():
        logits, cache = engine._forward(ids, mask, pos, cache)
        steps.append(logits)
        for _ in range(5):
            mask = torch.cat([mask, mask.new_ones((len(PROMPTS), 1))], dim=1)
            pos = pos[:, -1:] + 1
            logits, cache = engine._forward(logits.argmax(-1)[:, None], mask, pos, cache)
            steps.append(logits)
    return steps


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_plain_lora_layers_run_in_the_own_forward_bit_for_bit_as_peft_runs_them(family):
    model, wrapped = _adapted(family)
    engine = TransformersEngine(model, max_batch_size=8)
    assert decoder.supports(model) and engine._own_forward
    own, theirs = _steps(engine, True), _steps(engine, False)  # False: the model's forward, peft's layers
    for a, b in zip(own, theirs):
        assert torch.equal(a, b)
    with wrapped.disable_adapter():  # the KL reference: adapters off, read at every call
        base = _steps(engine, True)
        assert all(torch.equal(a, b) for a, b in zip(base, _steps(engine, False)))
    assert not torch.equal(base[0], own[0])  # the adapters did change the logits


def test_other_adapters_go_through_the_models_forward():
    assert not decoder.supports(_adapted("llama", use_dora=True)[0])  # DoRA: a LoRA variant
    assert not decoder.supports(_adapted("llama", target_modules=["embed_tokens", "q_proj"])[0])
    assert not decoder.supports(_adapted("qwen3", target_modules=["q_proj"], use_dora=True)[0])
