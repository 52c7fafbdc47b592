"""TransformersEngine on a tiny random Qwen3: exactness against HF generate, batching, sampling, concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlfcore.engines.base import SamplingParams  # noqa: E402
from rlfcore.engines.transformers import TransformersEngine  # noqa: E402

PROMPTS = [[5, 17, 42], [7, 8, 9, 10, 11, 12, 13, 14, 15], [100], [3, 250, 31, 4, 1]]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def tiny_qwen3(seed: int = 0, **overrides: Any):
    """A random two-layer Qwen3 with grouped K/V heads; ``overrides`` change its config."""
    torch.manual_seed(seed)
    settings = {
        "vocab_size": 300,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 64,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
    config = transformers.Qwen3Config(**{**settings, **overrides})
    model = transformers.Qwen3ForCausalLM(config).float()
    with torch.no_grad():  # sharper logits than the default init: fewer near-ties, more varied argmaxes
        model.lm_head.weight.mul_(25)
    return model.eval()


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3()


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=n,
        min_new_tokens=n,
        pad_token_id=0,
        eos_token_id=None,
    )
    return out[0, len(prompt) :].tolist()


def forward_logp(model, prompt: list[int], generated: list[int], temperature: float = 1.0) -> list[float]:
    """The logprob of each generated token from one plain forward pass over prompt + generated."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(generated)]


async def test_greedy_matches_hf_generate_alone_and_batched(model):
    expected = [hf_greedy(model, p, GREEDY.max_tokens) for p in PROMPTS]
    assert len({tuple(e) for e in expected}) == len(expected)  # the prompts really lead to different texts
    engine = TransformersEngine(model, max_batch_size=8)
    for prompt, want in zip(PROMPTS, expected):
        gen = await engine.generate(prompt, GREEDY)
        assert gen.token_ids == want and gen.finish_reason == "length"
    before = engine.stats.batches
    batched = await asyncio.gather(*(engine.generate(p, GREEDY) for p in PROMPTS))
    assert engine.stats.batches == before + 1  # all four ran left-padded in one batch
    assert [g.token_ids for g in batched] == expected
    await engine.close()


async def test_greedy_logprobs_equal_a_plain_forward_pass(model):
    engine = TransformersEngine(model)
    gens = await asyncio.gather(*(engine.generate(p, GREEDY) for p in PROMPTS))
    for prompt, gen in zip(PROMPTS, gens):
        assert gen.logprobs == pytest.approx(forward_logp(model, prompt, gen.token_ids), abs=1e-4)
        assert all(lp < 0 for lp in gen.logprobs)


async def test_sampled_logprobs_are_at_temperature_before_filtering(model):
    engine = TransformersEngine(model)
    hot = SamplingParams(temperature=0.7, max_tokens=10, seed=3)
    gen = await engine.generate(PROMPTS[0], hot)
    assert gen.logprobs == pytest.approx(forward_logp(model, PROMPTS[0], gen.token_ids, 0.7), abs=1e-4)
    # top_k=1 always takes the argmax, yet the reported logprob is the unfiltered one (not 0).
    topk1 = await engine.generate(PROMPTS[1], SamplingParams(temperature=1.0, top_k=1, max_tokens=10))
    assert topk1.token_ids == hf_greedy(model, PROMPTS[1], 10)
    assert topk1.logprobs == pytest.approx(forward_logp(model, PROMPTS[1], topk1.token_ids), abs=1e-4)
    assert max(topk1.logprobs) < -1e-3
    tiny_p = await engine.generate(PROMPTS[2], SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=10))
    assert tiny_p.token_ids == hf_greedy(model, PROMPTS[2], 10)


async def test_stop_token_ends_generation_and_is_included(model):
    free = hf_greedy(model, PROMPTS[1], 12)
    stop = free[4]
    first = free.index(stop)
    engine = TransformersEngine(model)
    stopped, other = await asyncio.gather(
        engine.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[299, stop])),
        engine.generate(PROMPTS[0], GREEDY),  # shares the batch and keeps going after the first row is dropped
    )
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free[: first + 1] and stopped.token_ids[-1] == stop
    assert len(stopped.logprobs) == len(stopped.token_ids)
    assert other.token_ids == hf_greedy(model, PROMPTS[0], 12) and other.finish_reason == "length"


async def test_max_tokens_per_request_gives_length(model):
    engine = TransformersEngine(model)
    gens = await asyncio.gather(
        *(engine.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=n)) for n in (1, 3, 7))
    )
    assert [len(g.token_ids) for g in gens] == [1, 3, 7]
    assert all(g.finish_reason == "length" and len(g.logprobs) == len(g.token_ids) for g in gens)
    assert gens[2].token_ids[:3] == gens[1].token_ids


async def test_concurrent_calls_are_batched_up_to_the_limit(model):
    engine = TransformersEngine(model, max_batch_size=2)
    gens = await asyncio.gather(*(engine.generate(PROMPTS[i % 4], GREEDY) for i in range(5)))
    assert len(gens) == 5
    assert engine.stats.batches == 3 and engine.stats.requests == 5
    assert engine.stats.generated_tokens == 5 * GREEDY.max_tokens
    # First pass over the prompts, then one pass per further token: 3 batches x 12 passes.
    assert engine.stats.forward_passes == 3 * GREEDY.max_tokens


async def test_seeded_sampling_is_reproducible_whatever_the_batch(model):
    engine = TransformersEngine(model)
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=16, seed=1234)
    alone = await engine.generate(PROMPTS[0], params)
    again = await engine.generate(PROMPTS[0], params)
    batched, greedy, *_ = await asyncio.gather(  # beside a greedy row and unseeded ones
        engine.generate(PROMPTS[0], params),
        engine.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=16)),
        *(engine.generate(p, SamplingParams(temperature=1.0, max_tokens=16)) for p in PROMPTS[2:]),
    )
    other_seed = await engine.generate(
        PROMPTS[0], SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=16, seed=99)
    )
    assert alone.token_ids == again.token_ids == batched.token_ids
    assert greedy.token_ids == hf_greedy(model, PROMPTS[1], 16)
    assert alone.logprobs == pytest.approx(batched.logprobs, abs=1e-4)
    assert other_seed.token_ids != alone.token_ids
    assert alone.token_ids != hf_greedy(model, PROMPTS[0], 16)  # it really sampled


async def test_event_loop_keeps_running_during_generation(model):
    engine = TransformersEngine(model)
    ticks = 0
    seen: list[int] = []  # the tick count at each forward pass, read from the worker thread
    handle = model.register_forward_hook(lambda *_: seen.append(ticks))

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*(engine.generate(p, SamplingParams(temperature=0.0, max_tokens=40)) for p in PROMPTS))
    finally:
        task.cancel()
        handle.remove()
    assert len(seen) == 40
    assert seen[-1] > seen[0]  # the ticker advanced between the first and the last forward pass


async def test_generates_from_current_weights_in_eval_mode_and_restores_training(model):
    trained = tiny_qwen3(seed=1)
    trained.train()
    trained.model.layers[0].eval()  # a submodule frozen in eval mode by the trainer stays so
    modes: list[bool] = []
    handle = trained.register_forward_hook(lambda module, *_: modes.append(module.training))
    engine = TransformersEngine(trained)
    before = await engine.generate(PROMPTS[0], GREEDY)
    params = list(trained.parameters())
    trained.load_state_dict(model.state_dict())  # copies into the same tensors, as a weight sync does
    assert all(a is b for a, b in zip(params, trained.parameters()))
    after = await engine.generate(PROMPTS[0], GREEDY)
    handle.remove()
    want = hf_greedy(model, PROMPTS[0], GREEDY.max_tokens)
    assert before.token_ids != want and after.token_ids == want
    assert modes and not any(modes)
    assert trained.training and trained.model.layers[1].training and not trained.model.layers[0].training
    assert engine.model is trained


async def test_from_pretrained_loads_a_saved_folder(model, tmp_path):
    model.save_pretrained(tmp_path)
    engine = TransformersEngine.from_pretrained(str(tmp_path), device="cpu", dtype="float32", max_batch_size=4)
    assert engine.device.type == "cpu" and engine.max_batch_size == 4
    gen = await engine.generate(PROMPTS[3], GREEDY)
    assert gen.token_ids == hf_greedy(model, PROMPTS[3], GREEDY.max_tokens)


async def test_bad_requests_fail_clearly_and_close_fails_waiters(model):
    engine = TransformersEngine(model)
    with pytest.raises(ValueError, match="prompt is empty"):
        await engine.generate([], GREEDY, request_id="t1")
    with pytest.raises(ValueError, match="max_tokens"):
        await engine.generate([1], SamplingParams(max_tokens=0))
    engine.batch_wait_s = 0.5
    pending = asyncio.ensure_future(engine.generate([1, 2], GREEDY))
    await asyncio.sleep(0)  # queued; the worker is waiting for company
    await engine.close()
    with pytest.raises(RuntimeError, match="closed before this request ran"):
        await pending


def test_one_engine_serves_successive_event_loops(model):
    """A trainer may run each rollout under its own asyncio.run; the engine follows the new loop."""
    engine = TransformersEngine(model)
    first = asyncio.run(engine.generate(PROMPTS[0], GREEDY))
    second = asyncio.run(engine.generate(PROMPTS[0], GREEDY))
    assert first.token_ids == second.token_ids == hf_greedy(model, PROMPTS[0], GREEDY.max_tokens)
    assert engine.stats.batches == 2


def test_seeded_draws_follow_the_filtered_distribution(model):
    """Seeded rows sample by inverse CDF in one batched search: the frequencies must match the
    probabilities, and tokens top-k drops must never come out."""
    from rlfcore.engines.transformers import _Request

    engine = TransformersEngine(model, pad_token_id=0)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]]).clamp(min=1e-12))
    counts = {"all": torch.zeros(5), "top3": torch.zeros(5)}
    for name, top_k in (("all", 0), ("top3", 3)):
        rows = [_Request([1], SamplingParams(temperature=1.0, top_k=top_k, seed=s), None) for s in range(4000)]
        for r in rows:
            r.generator = torch.Generator().manual_seed(r.params.seed)
        tokens, _, _ = engine._sample(logits.expand(len(rows), -1), rows)
        counts[name] += torch.bincount(tokens, minlength=5)
    freq = counts["all"] / 4000
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0]), atol=0.03)
    top3 = counts["top3"] / 4000
    assert top3[3] == 0 and top3[4] == 0
    assert torch.allclose(top3[:3], torch.tensor([0.5, 0.3, 0.15]) / 0.95, atol=0.03)


async def test_threads_apply_while_decoding_and_are_restored(model):
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
    try:
        before = torch.get_num_threads()
        engine = TransformersEngine(model, pad_token_id=0, threads=1)
        await engine.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=3))
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == before
    finally:
        hook.remove()


async def test_stop_string_ends_generation_at_the_token_that_completes_it(model):
    """A stop string spanning two generated tokens ends the row at the second (kept, no EOS added);
    a row without stop strings in the same batch runs on."""
    from rlfcore.chat import ByteChatTokenizer

    tok = ByteChatTokenizer()
    free = hf_greedy(model, PROMPTS[1], 12)
    text = [tok.decode([t]) for t in free]
    k = next(i for i in range(2, 11) if text[i] and text[i + 1] and text[i] + text[i + 1] not in "".join(text[:i]))
    stop = text[k] + text[k + 1]
    engine = TransformersEngine(model, tokenizer=tok)
    stopped, other = await asyncio.gather(
        engine.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=12, stop=[stop, "never-generated"])),
        engine.generate(PROMPTS[0], GREEDY),
    )
    assert stopped.finish_reason == "stop" and stopped.token_ids == free[: k + 2]
    assert stop in tok.decode(stopped.token_ids) and stop not in tok.decode(stopped.token_ids[:-1])
    assert other.token_ids == hf_greedy(model, PROMPTS[0], 12) and other.finish_reason == "length"
    with pytest.raises(ValueError, match="stop strings .* need the engine's tokenizer"):
        await TransformersEngine(model).generate(PROMPTS[0], SamplingParams(max_tokens=3, stop=["x"]))


async def submit_after_passes(model, engine, passes: int, prompt: list[int], params: SamplingParams):
    """Send ``prompt`` once the engine has run ``passes`` forward passes, i.e. while other rows decode."""
    loop = asyncio.get_running_loop()
    reached = asyncio.Event()
    count = 0

    def hook(*_):
        nonlocal count
        count += 1
        if count == passes:
            loop.call_soon_threadsafe(reached.set)

    handle = model.register_forward_hook(hook)
    try:
        await reached.wait()
    finally:
        handle.remove()
    return await engine.generate(prompt, params)


async def test_a_request_joins_rows_already_decoding_and_leaves_before_them(model):
    """Continuous batching: the late request is prefilled between decode steps, decodes alongside the
    long row and is answered long before it; both stay token-exact against HF generate alone."""
    engine = TransformersEngine(model)
    long_params = SamplingParams(temperature=0.0, max_tokens=120)
    done: list[str] = []

    async def tracked(name, coro):
        gen = await coro
        done.append(name)
        return gen

    long, late = await asyncio.gather(
        tracked("long", engine.generate(PROMPTS[1], long_params)),
        tracked("late", submit_after_passes(model, engine, 5, PROMPTS[0], GREEDY)),
    )
    assert done == ["late", "long"]
    assert engine.stats.joins == 1 and engine.stats.batches == 2
    assert long.token_ids == hf_greedy(model, PROMPTS[1], 120)
    assert late.token_ids == hf_greedy(model, PROMPTS[0], GREEDY.max_tokens)
    # 120 passes for the long row, 1 prefill for the late one: it never ran a batch of its own
    assert engine.stats.forward_passes == 121


async def test_static_scheduling_makes_a_late_request_wait_for_the_batch(model):
    """The former engine, kept as the benchmark's peer: the late request starts after the long row ends."""
    engine = TransformersEngine(model, scheduling="static")
    long, late = await asyncio.gather(
        engine.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=40)),
        submit_after_passes(model, engine, 5, PROMPTS[0], GREEDY),
    )
    assert engine.stats.joins == 0 and engine.stats.batches == 2
    assert engine.stats.forward_passes == 40 + GREEDY.max_tokens
    assert late.token_ids == hf_greedy(model, PROMPTS[0], GREEDY.max_tokens)
    assert long.token_ids == hf_greedy(model, PROMPTS[1], 40)
    with pytest.raises(ValueError, match="scheduling: 'paged' is not one of continuous, static"):
        TransformersEngine(model, scheduling="paged")


async def test_seeded_rows_are_reproducible_whatever_joins_or_leaves(model):
    """Same seed, same tokens: alone, joining a running batch with a longer prompt, and hosting joiners."""
    engine = TransformersEngine(model)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seed=7)
    host_params = SamplingParams(temperature=1.0, max_tokens=60, seed=11)
    alone = await engine.generate(PROMPTS[3], params)
    host_alone = await engine.generate(PROMPTS[1], host_params)
    host, joined, short_joined = await asyncio.gather(
        engine.generate(PROMPTS[1], host_params),
        submit_after_passes(model, engine, 3, PROMPTS[3], params),
        # a row that leaves early, so columns only it used are cut while the others decode
        submit_after_passes(model, engine, 2, list(range(20, 60)), SamplingParams(temperature=1.0, max_tokens=3)),
    )
    assert engine.stats.joins >= 2
    assert joined.token_ids == alone.token_ids and host.token_ids == host_alone.token_ids
    assert joined.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert host.logprobs == pytest.approx(host_alone.logprobs, abs=1e-4)
    assert len(short_joined.token_ids) == 3


async def test_logprobs_of_a_joined_row_equal_the_trainers_recomputation(model):
    """What the trainer recomputes (one forward pass over prompt + completion at temperature T) is what
    the engine reported for a row that was merged into a running batch."""
    engine = TransformersEngine(model)
    params = SamplingParams(temperature=0.7, max_tokens=16, seed=3)
    _, joined = await asyncio.gather(
        engine.generate(PROMPTS[0], SamplingParams(temperature=1.0, max_tokens=50, seed=1)),
        submit_after_passes(model, engine, 4, PROMPTS[2], params),
    )
    assert engine.stats.joins == 1
    want = forward_logp(model, PROMPTS[2], joined.token_ids, temperature=0.7)
    assert joined.logprobs == pytest.approx(want, abs=1e-4)


async def test_next_turn_reuses_the_previous_turns_kv_cache_exactly(model):
    """A trajectory's next turn (same request id, a prompt that continues the last one) prefills only
    the new tokens; its tokens and logprobs are those of a fresh prefill over the whole prompt."""
    engine = TransformersEngine(model)
    first = await engine.generate(PROMPTS[1], GREEDY, request_id="t0")
    prompt = PROMPTS[1] + first.token_ids + [7, 77, 177]  # as a tool result appends an observation
    params = SamplingParams(temperature=0.9, max_tokens=10, seed=5)
    second = await engine.generate(prompt, params, request_id="t0")
    assert engine.stats.reused_tokens == len(PROMPTS[1]) + GREEDY.max_tokens - 1
    fresh = await TransformersEngine(model).generate(prompt, params)
    assert second.token_ids == fresh.token_ids
    assert second.logprobs == pytest.approx(forward_logp(model, prompt, second.token_ids, 0.9), abs=1e-4)
    third_prompt = prompt + second.token_ids + [3]
    third = await engine.generate(third_prompt, GREEDY, request_id="t0")
    assert third.token_ids == hf_greedy(model, third_prompt, GREEDY.max_tokens)
    assert engine.stats.reused_tokens == len(PROMPTS[1]) + GREEDY.max_tokens - 1 + len(prompt) + 10 - 1


async def test_reused_and_fresh_rows_prefill_together_and_stay_exact(model):
    """Rows with cached prefixes of different lengths and rows without one share one prefill."""
    engine = TransformersEngine(model)
    firsts = await asyncio.gather(
        *(
            engine.generate(p, SamplingParams(temperature=0.0, max_tokens=n), request_id=f"r{i}")
            for i, (p, n) in enumerate(zip(PROMPTS, (3, 9, 5, 1)))
        )
    )
    prompts = [p + g.token_ids + [11] * (i + 1) for i, (p, g) in enumerate(zip(PROMPTS, firsts))]
    prompts.append([9, 8, 7, 6, 5, 4])  # a new trajectory
    before = engine.stats.batches
    seconds = await asyncio.gather(*(engine.generate(p, GREEDY, request_id=f"r{i}") for i, p in enumerate(prompts)))
    assert engine.stats.batches == before + 1
    assert engine.stats.reused_tokens == sum(len(p) + n - 1 for p, n in zip(PROMPTS, (3, 9, 5, 1)))
    assert [g.token_ids for g in seconds] == [hf_greedy(model, p, GREEDY.max_tokens) for p in prompts]


async def test_a_kept_cache_is_not_reused_after_the_weights_change_or_the_history_does(model):
    trained = tiny_qwen3(seed=2)
    engine = TransformersEngine(trained)
    first = await engine.generate(PROMPTS[0], GREEDY, request_id="a")
    await engine.generate(PROMPTS[2], GREEDY, request_id="b")
    trained.load_state_dict(model.state_dict())  # a weight sync between steps, same request ids
    prompt = PROMPTS[0] + first.token_ids + [5]
    again = await engine.generate(prompt, GREEDY, request_id="a")
    assert engine.stats.reused_tokens == 0  # the cache of the old weights was dropped
    assert again.token_ids == hf_greedy(model, prompt, GREEDY.max_tokens)
    edited = [PROMPTS[0][0] + 1, *prompt[1:], *again.token_ids]  # not a continuation of what "a" last saw
    edited_gen = await engine.generate(edited, GREEDY, request_id="a")
    assert engine.stats.reused_tokens == 0
    assert edited_gen.token_ids == hf_greedy(model, edited, GREEDY.max_tokens)


async def test_kept_caches_stay_within_their_memory_budget(model):
    engine = TransformersEngine(model)
    gens = await asyncio.gather(*(engine.generate(p, GREEDY, request_id=f"k{i}") for i, p in enumerate(PROMPTS)))
    one_row = engine._prefix_bytes / len(PROMPTS)
    assert len(engine._prefixes) == len(PROMPTS) and one_row > 0
    engine.max_prefix_bytes = int(2.5 * one_row)  # room for about two of them: the oldest go first
    await engine.generate(PROMPTS[0], GREEDY, request_id="k9")
    assert engine._prefix_bytes <= engine.max_prefix_bytes and len(engine._prefixes) <= 2
    assert "k9" in engine._prefixes
    prompt = PROMPTS[0] + gens[0].token_ids + [4]
    gen = await engine.generate(prompt, GREEDY, request_id="k0")  # its cache was evicted: a full prefill
    assert engine.stats.reused_tokens == 0 and gen.token_ids == hf_greedy(model, prompt, GREEDY.max_tokens)


async def test_grouped_attention_runs_only_inside_the_engines_forward_passes(model):
    """The engine's attention is set for its own forward passes and the model's is back before any
    caller is answered, so a trainer's forward right after a rollout runs the model's own attention."""
    from rlfcore.engines import kvcache

    before = model.config._attn_implementation
    seen: list[str] = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(module.config._attn_implementation))
    try:
        engine = TransformersEngine(model)
        gen = await engine.generate(PROMPTS[0], GREEDY)
    finally:
        handle.remove()
    assert seen and set(seen) == {kvcache.GROUPED_ATTENTION}
    assert before in ("sdpa", "eager") and model.config._attn_implementation == before
    assert gen.token_ids == hf_greedy(model, PROMPTS[0], GREEDY.max_tokens)


async def test_a_sliding_window_model_keeps_its_own_cache_and_rows_do_not_join():
    """A model with sliding-window layers: the engine leaves the cache and attention to the model, a
    late request waits for the running rows instead of joining them, and greedy stays exact."""
    sliding = tiny_qwen3(use_sliding_window=True, sliding_window=8, max_window_layers=1)
    engine = TransformersEngine(sliding)
    long, late = await asyncio.gather(
        engine.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=20)),
        submit_after_passes(sliding, engine, 5, PROMPTS[0], GREEDY),
    )
    assert engine.stats.joins == 0 and engine.stats.batches == 2
    assert long.token_ids == hf_greedy(sliding, PROMPTS[1], 20)
    assert late.token_ids == hf_greedy(sliding, PROMPTS[0], GREEDY.max_tokens)


async def test_a_groups_shared_prompt_is_prefilled_once_and_each_row_samples_as_alone(model):
    """A GRPO group's first turn: requests with the same prompt share one prefill row (the forward
    pass sees the distinct prompts only), and each seeded row draws the tokens it draws alone."""
    engine = TransformersEngine(model)
    group = [SamplingParams(temperature=1.0, max_tokens=10, seed=s) for s in (1, 2, 3)]
    alone = [await engine.generate(PROMPTS[1], p) for p in group]
    other_alone = await engine.generate(PROMPTS[3], group[0])
    rows: list[int] = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        together = await asyncio.gather(
            *(engine.generate(PROMPTS[1], p) for p in group), engine.generate(PROMPTS[3], group[0])
        )
    finally:
        handle.remove()
    assert rows[0] == 2  # the prefill: two distinct prompts for four requests
    assert engine.stats.shared_prompt_tokens == 2 * len(PROMPTS[1])
    assert [g.token_ids for g in together] == [g.token_ids for g in [*alone, other_alone]]
    for got, want in zip(together, [*alone, other_alone]):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert len({tuple(g.token_ids) for g in together[:3]}) > 1  # the copies sampled apart


@pytest.mark.parametrize("spread", [0.1, 3.0])  # flat rows: the cut lies beyond the first candidates
@pytest.mark.parametrize("top_k,top_p", [(0, 0.9), (100, 1.0), (5, 0.5)])
def test_the_top_k_top_p_cut_keeps_what_a_full_sort_keeps(spread, top_k, top_p):
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(16, 300) * spread, dim=-1)
    vocab = logp.shape[-1]
    ordered, order = logp.exp().sort(dim=-1, descending=True)
    drop = torch.arange(vocab)[None] >= (top_k if 0 < top_k < vocab else vocab)
    drop = drop | ((ordered.cumsum(-1) - ordered) >= top_p)
    drop[:, 0] = False
    want = torch.zeros_like(logp).scatter(1, order, ordered.masked_fill(drop, 0.0))
    got = TransformersEngine._filtered_probs(logp, [SamplingParams(top_k=top_k, top_p=top_p)] * 16)
    assert torch.equal(got > 0, want > 0) and torch.allclose(got, want, rtol=0, atol=0)
    assert 1 <= int((got > 0).sum(-1).min()) < vocab


@pytest.mark.parametrize("vocab", [300, 5000, 49152, 50000])
def test_two_level_inverse_cdf_picks_what_the_whole_cumulative_sum_does(vocab):
    """One block for a small vocabulary, blocks of 1,024 (padded when the vocabulary is not a multiple)
    for a large one: the same token as searching the whole cumulative sum, never one of zero mass."""
    from rlfcore.engines.transformers import _inverse_cdf

    g = torch.Generator().manual_seed(vocab)
    probs = torch.softmax(torch.randn(64, vocab, generator=g) * 4, dim=-1)
    probs[:, ::3] = 0.0  # filtered tokens, as top-k/top-p leave them
    probs[0] = 0.0
    probs[0, vocab // 2 + 1] = 1.0  # all the mass on one token
    u = torch.rand(64, generator=g)
    u[1], u[2] = 0.0, 1.0 - 2**-24  # the edges of [0, 1)
    cdf = probs.cumsum(-1)
    whole = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    picked = _inverse_cdf(probs, u)
    assert bool((probs.gather(1, picked[:, None]) > 0).all()) and picked[0] == vocab // 2 + 1
    assert (picked == whole).float().mean() >= 62 / 64  # the last token or two may round the other way


async def test_decode_steps_attend_to_whole_buffers_with_the_free_columns_masked(model):
    """A decode step reads each layer's whole K/V buffer (contiguous: no copy in bfloat16's kernels),
    free columns masked out: the logprobs are still those of a plain forward pass."""
    from rlfcore.engines import kvcache

    engine = TransformersEngine(model)
    seen: list[tuple[int, int]] = []
    widen = kvcache.widen

    def spy(cache: Any, mask: torch.Tensor) -> torch.Tensor:
        wide = widen(cache, mask)
        layer = cache.layers[0]
        seen.append((wide.shape[1], layer.end - layer.start))
        assert wide.shape[1] == layer._k.shape[-2] and int(wide.sum()) == int(mask.sum())
        return wide

    kvcache.widen = spy
    try:
        gens = await asyncio.gather(*(engine.generate(p, GREEDY) for p in PROMPTS))
    finally:
        kvcache.widen = widen
    assert len(seen) == GREEDY.max_tokens - 1 and all(cols > live + 1 for cols, live in seen)  # free columns there
    for prompt, gen in zip(PROMPTS, gens):
        assert gen.logprobs == pytest.approx(forward_logp(model, prompt, gen.token_ids), abs=1e-4)


@pytest.fixture(scope="session")
def smollm2() -> Any:
    """The fetched SmolLM2-135M-Instruct float32 folder (built on first use, then cached per machine)."""
    pytest.importorskip("gguf")
    from rlfcore.models import KNOWN, fetch

    return fetch(KNOWN["smollm2-135m-instruct"], "float32", say=lambda _: None)


@pytest.mark.slow
async def test_a_real_model_decodes_on_the_fast_path_in_bfloat16_close_to_float32(smollm2):
    """SmolLM2 in float32 and bfloat16 engages the engine's KV cache, grouped attention and own
    forward; the logprobs of what bfloat16 samples, teacher-forced in each dtype, drift little."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2)
    questions = ["What is 12 * 7?", "Name a prime above 50.", "Compute 4819 / 61.", "Say hi in French."]
    prompts = [
        list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, return_dict=False))
        for q in questions
    ]
    models = {d: AutoModelForCausalLM.from_pretrained(smollm2, dtype=d).eval() for d in (torch.float32, torch.bfloat16)}
    engines = {d: TransformersEngine(m, threads=1) for d, m in models.items()}
    assert all(e._slots and e._grouped and e._own_forward for e in engines.values())
    params = [SamplingParams(temperature=1.0, max_tokens=24, seed=i) for i in range(len(prompts))]
    gens = await asyncio.gather(*(engines[torch.bfloat16].generate(p, s) for p, s in zip(prompts, params)))
    deltas = []
    for prompt, gen in zip(prompts, gens):
        lps = [forward_logp(m, prompt, gen.token_ids) for m in models.values()]
        deltas += [abs(a - b) for a, b in zip(*lps)]
    assert len(deltas) == 4 * 24
    assert sum(deltas) / len(deltas) < 0.05 and max(deltas) < 1.0, (sum(deltas) / len(deltas), max(deltas))
