"""The tiny local tokenizer and model: offline loading, exact chat rendering, digits, determinism."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from rlfcore.chat import END_OF_TURN, SPECIAL_TOKENS, ByteChatTokenizer, HFChatTokenizer
from rlfcore.tinymodel import build_model, build_tiny, build_tokenizer, count_parameters, describe
from tests.support import ROOT

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Look a query up in the local corpus (en, fr: é, ü)",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]

MESSAGES = [
    {"role": "system", "content": "You answer with one number."},
    {"role": "user", "content": "How many people live in Lyon?\nAnswer in <answer></answer>."},
    {
        "role": "assistant",
        "content": "<think>\nI should search.\n</think>\n\nLet me look.",
        "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "Lyon population"}}},
            {"type": "function", "function": {"name": "search", "arguments": {"query": "Lyon 2024"}}},
        ],
    },
    {"role": "tool", "content": "Lyon: 522,250 inhabitants (2021)."},
    {"role": "tool", "content": "No result .  \n\n  Try again , it 's late !"},
    {"role": "assistant", "content": "<think>\nFound it.\n</think>\n\n<answer>522250</answer>"},
    {"role": "user", "content": "And Paris?  🗼"},
]


def corpus() -> list[str]:
    """Rendered conversations and prose with many numbers, enough to fill a 512-token vocabulary."""
    byte = ByteChatTokenizer()
    texts = [byte.render(MESSAGES, TOOLS, True)] * 5
    for i in range(300):
        texts.append(
            f"Question {i}: what is {i * 37 % 1000} plus {i * 91 % 997}? The answer is {i * 37 % 1000 + i * 91 % 997}.\n"
            f"The river number {i} flows through city {i % 17} with population {i * 12345 % 99991}; search again."
        )
    return texts


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(corpus(), tmp_path_factory.mktemp("tiny") / "model", vocab_size=512)


@pytest.fixture(scope="module")
def tok(built: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(built)


@pytest.fixture(scope="module")
def model(built: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(built)


def test_auto_classes_load_the_folder(built: Path, tok, model) -> None:
    assert (built / "model.safetensors").is_file()
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.vocab_size == len(tok) <= 512
    assert len(tok) > 400, "BPE training should have added merges on top of the 265 fixed tokens"
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_chat_render_matches_byte_tokenizer_and_round_trips(tok) -> None:
    hf, byte = HFChatTokenizer(tok), ByteChatTokenizer()
    for messages, tools, gen in [(MESSAGES, TOOLS, True), (MESSAGES[1:3], None, False), (MESSAGES, None, True)]:
        text = hf.render(messages, tools, gen)
        assert text == byte.render(messages, tools, gen)
        ids = hf.encode(text)
        assert hf.decode(ids) == text
        assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == text.count("<|im_start|>")
    assert "Lyon 2024" in text and "🗼" in text


def test_each_digit_is_its_own_token_and_never_merged(tok) -> None:
    vocab = tok.get_vocab()
    digit_ids = [tok.encode(d, add_special_tokens=False) for d in "0123456789"]
    assert digit_ids == [[vocab[d]] for d in "0123456789"]
    assert tok.encode("12345", add_special_tokens=False) == [vocab[d] for d in "12345"]
    ids = tok.encode("population 522250.", add_special_tokens=False)
    assert [i for i in ids if tok.convert_ids_to_tokens(i).isdigit()] == [vocab[d] for d in "522250"]
    merged = [t for t in vocab if len(t) > 1 and t not in SPECIAL_TOKENS and any(c.isdigit() for c in t)]
    assert merged == [], f"tokens merging digits: {merged[:5]}"


def test_special_tokens_are_single_ids(tok) -> None:
    ids = [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    assert len(set(ids)) == len(SPECIAL_TOKENS)
    for t, i in zip(SPECIAL_TOKENS, ids):
        assert tok.encode(t, add_special_tokens=False) == [i]
        assert i in tok.encode(f"ab{t}cd", add_special_tokens=False)
    assert set(tok.all_special_tokens) >= set(SPECIAL_TOKENS)


def test_eos_and_pad_ids(tok, model) -> None:
    im_end, pad = tok.convert_tokens_to_ids(END_OF_TURN), tok.convert_tokens_to_ids("<|endoftext|>")
    assert (tok.eos_token, tok.pad_token) == (END_OF_TURN, "<|endoftext|>")
    assert (model.config.eos_token_id, model.config.pad_token_id) == (im_end, pad)
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (im_end, pad)
    assert im_end in HFChatTokenizer(tok).eos_token_ids


def test_forward_and_generate(tok, model) -> None:
    import torch

    prompt = HFChatTokenizer(tok).render(MESSAGES[:2], TOOLS, True)
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()
    out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert out.shape[0] == 1 and ids.shape[1] < out.shape[1] <= ids.shape[1] + 6
    assert torch.equal(out[0, : ids.shape[1]], ids[0])
    assert int(out.max()) < len(tok)


def _fingerprint(folder: Path) -> tuple[str, str]:
    from safetensors.torch import load_file

    model_part = json.loads((folder / "tokenizer.json").read_text())["model"]
    vocab_hash = hashlib.sha256(json.dumps(model_part, sort_keys=True).encode()).hexdigest()
    tensors = load_file(folder / "model.safetensors")
    weights = hashlib.sha256(b"".join(tensors[k].numpy().tobytes() for k in sorted(tensors))).hexdigest()
    return vocab_hash, weights


def model_weight(folder: Path, name: str):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")[name]


def test_same_inputs_give_same_files_and_seed_matters(built: Path, tmp_path: Path) -> None:
    import torch

    rng_before = torch.random.get_rng_state()
    again = build_tiny(corpus(), tmp_path / "again", vocab_size=512)
    assert torch.equal(torch.random.get_rng_state(), rng_before), "building must not move the caller's RNG"
    assert _fingerprint(again) == _fingerprint(built)
    other_seed = build_model(again, tmp_path / "seed1", seed=1)
    assert not torch.equal(other_seed.model.embed_tokens.weight, model_weight(again, "model.embed_tokens.weight"))


def test_parameter_count_counts_tied_embeddings_once(built: Path, tmp_path: Path, model) -> None:
    untied = build_model(built, tmp_path / "untied", tie_word_embeddings=False)
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    assert count_parameters(untied) == count_parameters(model) + vocab * hidden
    assert f"{count_parameters(model):,} parameters" in describe(model)


def test_bad_sizes_are_named(tmp_path: Path, built: Path) -> None:
    with pytest.raises(ValueError, match="vocab_size=100"):
        build_tokenizer(["abc"], tmp_path / "t", vocab_size=100)
    with pytest.raises(ValueError, match="hidden_size=65.*num_heads=4"):
        build_model(built, tmp_path / "m", hidden_size=65)
    with pytest.raises(ValueError, match="num_heads=4.*num_kv_heads=3"):
        build_model(built, tmp_path / "m", num_kv_heads=3)


def test_import_is_cheap() -> None:
    code = "import sys, rlfcore.tinymodel; print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
