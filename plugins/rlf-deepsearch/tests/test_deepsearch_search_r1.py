"""``format: search-r1`` gives the tokens Search-R1's own generation loop would feed the model.

The reference below re-implements, from Search-R1's ``LLMGenerationManager`` (search_r1/llm_agent/
generation.py), what that loop does with a model's free text: decode without special tokens, cut
after the first ``</search>`` (else ``</answer>``), re-tokenise; append ``"\\n\\n<information>...
</information>\\n\\n"`` (documents as ``_passages2string`` writes them) or the invalid-action note,
tokenised on its own and masked out. rlf's loop runs the same scripted model with stop strings.

Tokenizers: no Qwen tokenizer can be downloaded here, so a byte-level BPE tokenizer is trained on
the spot (rlfcore.tinymodel) and given the real Qwen2.5 and Qwen3 chat templates that trl ships.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

from rlf_deepsearch.index import BM25Index  # noqa: E402
from rlf_deepsearch.prepare import to_row  # noqa: E402

from rlfcore.testing import (  # noqa: E402
    SPECIAL_TOKENS,
    HFChatTokenizer,
    RewardPipeline,
    Rollout,
    ScriptedEngine,
    make_runtime,
    normalize_row,
)

TEMPLATES = Path(trl.__file__).parent / "chat_templates"
PASSAGES = [
    {
        "id": "p1",
        "title": "Corliss Archer",
        "text": "Corliss Archer is a fictional teenage girl.\nShirley Temple played her in Kiss and Tell.",
    },
    {
        "id": "p2",
        "title": "Shirley Temple",
        "text": "Shirley Temple Black was an American actress and diplomat, Chief of Protocol of the United States.",
    },
    {
        "id": "p3",
        "title": "Kiss and Tell (1945 film)",
        "text": "Kiss and Tell is a 1945 comedy film starring Shirley Temple.",
    },
    {"id": "p4", "title": "Protocol", "text": "Diplomatic protocol is the set of rules of state ceremonies."},
]
QUESTION = {
    "id": "q1",
    "question": "What government position was held by the woman who portrayed Corliss Archer",
    "answers": ["Chief of Protocol"],
}
SCRIPT = [  # what the model writes if nothing stops it; <|im_end|> follows each text
    "<think>I should find who played Corliss Archer.</think>\n<search> Corliss Archer actress </search>\nDoc 1 is",
    "I am not sure what to do next.",
    "<think>Shirley Temple played her.</think>\n<search>Shirley Temple government position</search>",
    "<think>She was Chief of Protocol.</think>\n<answer> Chief of Protocol </answer> and more text",
]
TOPK = 2


def search_r1_reference(hf, prompt: str, index: BM25Index) -> tuple[list[int], list[int], list[int]]:
    """Prompt ids, response ids and info mask (1: model, 0: information) as Search-R1 builds them."""
    prompt_ids = hf(
        hf.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )["input_ids"]
    response, mask = [], []
    for _turn, free in enumerate(SCRIPT):
        generated = hf(free, add_special_tokens=False)["input_ids"] + [hf.convert_tokens_to_ids("<|im_end|>")]
        text = hf.decode(generated, skip_special_tokens=True)
        if "</search>" in text:
            text = text.split("</search>")[0] + "</search>"
        elif "</answer>" in text:
            text = text.split("</answer>")[0] + "</answer>"
        ids = hf(text, add_special_tokens=False)["input_ids"]
        response += ids
        mask += [1] * len(ids)
        action = next(
            iter(__import__("re").findall(r"<(search|answer)>(.*?)</\1>", text, __import__("re").DOTALL)), None
        )
        if action and action[0] == "answer":
            break
        if action:
            docs = index.search([action[1].strip()], TOPK)[0]
            found = ""
            for k, p in enumerate(docs):
                contents = p.contents  # the server's "contents": "Title"\ntext
                found += (
                    f"Doc {k + 1}(Title: {contents.split(chr(10))[0]}) {chr(10).join(contents.split(chr(10))[1:])}\n"
                )
            obs = f"\n\n<information>{found.strip()}</information>\n\n"
        else:
            obs = (
                "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
                "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
                "Let me try again.\n"
            )
        obs_ids = hf(obs, add_special_tokens=False)["input_ids"]
        response += obs_ids
        mask += [0] * len(obs_ids)
    return prompt_ids, response, mask


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("search-r1")
    (root / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    index = BM25Index.open(root / "corpus.jsonl", root / "index")
    return root, index


def _tokenizer(template: str):
    """A byte-level BPE tokenizer with Qwen's added tokens: ``<|...|>`` ones special, ``<think>``,
    ``<tool_call>`` and the like ordinary (decoding without special tokens keeps them, as with Qwen)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = [t for t in SPECIAL_TOKENS if t.startswith("<|")]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = [p["text"] for p in PASSAGES] + SCRIPT + [to_row(QUESTION, "t", "q1", fmt="search-r1")["prompt"]] * 3
    bpe.train_from_iterator(texts, trainer=trainer)
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in SPECIAL_TOKENS if t not in special])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = (TEMPLATES / template).read_text()
    ids = hf("<think>x</think><|im_end|>", add_special_tokens=False)["input_ids"]
    assert hf.decode(ids, skip_special_tokens=True) == "<think>x</think>" and len(ids) == 4
    return hf


@pytest.mark.parametrize("template", ["qwen2_5.jinja", "qwen3.jinja"])
def test_rollout_tokens_equal_search_r1s(corpus, template):
    root, index = corpus
    hf = _tokenizer(template)
    tok = HFChatTokenizer(hf)
    row = to_row(QUESTION, "t", "q1", fmt="search-r1")
    config = {
        "plugins": ["deepsearch"],
        "rollout": {
            "max_turns": 5,
            "max_response_tokens": 8192,
            "max_total_tokens": 16384,
            "sampling": {"stop": ["</search>", "</answer>"]},
        },
        "deepsearch": {
            "corpus": str(root / "corpus.jsonl"),
            "index_dir": str(root / "index"),
            "topk": TOPK,
            "format": "search-r1",
            "reward": "search-r1",
        },
    }
    runtime = make_runtime(config)

    async def go():
        async with runtime:
            [t] = await Rollout(runtime, ScriptedEngine(tok, {"q1": SCRIPT}), tok).run([normalize_row(row, 0)])
            await RewardPipeline(runtime).score([t])
        return t

    t = asyncio.run(go())
    prompt_ids, response_ids, mask = search_r1_reference(hf, row["prompt"], index)
    assert t.error is None and t.stop_reason == "answer" and t.num_turns == 4
    assert t.prompt_ids == prompt_ids
    assert t.response_ids == response_ids
    assert t.response_mask == mask
    # one assistant message holds the whole turn, as Search-R1's reward reads it
    [_user, assistant] = t.messages
    assert assistant["role"] == "assistant" and "tool_calls" not in assistant
    assert tok.encode(assistant["content"]) != [] and assistant["content"] == hf.decode(response_ids)
    assert t.tool_calls == 3 and t.tool_errors == 1
    # Search-R1's qa_em_format rule: right answer, but the invalid turn breaks the format: 1 - 0.2
    assert t.reward == pytest.approx(0.8) and t.reward_components["format"] == 0.0


def test_search_r1_needs_its_stop_strings(corpus):
    root, _ = corpus
    with pytest.raises(
        Exception, match=r"needs rollout.sampling.stop to hold \['</search>', '</answer>'\].*missing \['</answer>'\]"
    ):
        make_runtime(
            {
                "plugins": ["deepsearch"],
                "rollout": {"sampling": {"stop": ["</search>"]}},
                "deepsearch": {
                    "corpus": str(root / "corpus.jsonl"),
                    "index_dir": str(root / "index"),
                    "format": "search-r1",
                },
            }
        )
