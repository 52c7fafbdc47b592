"""A tiny random model on the real Qwen3 vocabulary and template, end to end on the CPU.

``model.init.tokenizer`` builds a randomly initialised model beside a byte-for-byte copy of the real
Qwen3 tokenizer folder (:mod:`rlfcore.realmodels`), and the real commands run on it: ``rlf
init-model``, ``rlf eval`` with the calculator served by rlf-mcp's real MCP server, and ``rlf train``
with its SFT warm start (the stage ``rlf sft`` runs alone). A random model almost never writes a tool
call, so the tool turns are played by the scripted engine on the same folder's tokenizer, through the
same eval code, tools and rewards; the model, tokenizer, template, server and parser are the real ones.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import operator
import shutil
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.rlf import run_rlf

EXAMPLE = ROOT / "examples" / "calculator"
SIZES = {"hidden_size": 32, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 64}
QWEN3_VOCABULARY = 151669  # 151643 BPE tokens and 26 added ones


def _config(tokenizer: Path) -> dict:
    return {
        "plugins": ["mcp"],
        "seed": 0,
        "model": {"path": "model", "init": {"tokenizer": str(tokenizer), **SIZES}},
        "data": {"train": "questions.jsonl", "eval": "eval.jsonl"},
        "sft": {"data": "demos.jsonl", "steps": 1, "batch_size": 1},
        "rollout": {"parser": "qwen3", "n": 2, "max_turns": 3, "max_total_tokens": 1024,
                    "sampling": {"temperature": 1.0, "max_tokens": 16}},
        "trainer": {"steps": 2, "prompts_per_step": 2, "micro_batch_size": 1, "checkpoint_every": 100},
        "engine": {"threads": 1},
        "tools": {"timeout_s": 10},
    }  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def task(real_models, tmp_path_factory) -> Path:
    """The calculator example's data and a config on the real Qwen3 tokenizer; ``rlf init-model`` run."""
    pytest.importorskip("rlf_mcp", reason="rlf-mcp is not installed (pip install -e plugins/rlf-mcp)")
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    for name in ("questions.jsonl", "eval.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    demos = (EXAMPLE / "demos.jsonl").read_text().splitlines(keepends=True)
    (folder / "demos.jsonl").write_text("".join(demos[:8]))  # SFT tokenises every demo first
    (folder / "run.yaml").write_text(json.dumps(_config(real_models.path("qwen3"))))
    out = run_rlf("init-model", "run.yaml", cwd=folder)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert f"vocab {QWEN3_VOCABULARY}" in out.stdout
    return folder


def _runtime(task: Path, *overrides: str):
    """The task's runtime in this process: rlf-mcp's calculator server started, the model's folder absolute."""
    from rlfcore.testing import make_runtime

    return make_runtime(task / "run.yaml", overrides=[f"model.path={task / 'model'}", *overrides])


@pytest.fixture(scope="module")
def schemas(task) -> list[dict]:
    """The tool schemas the MCP calculator server offers, as rlf lists them in prompts."""
    runtime = _runtime(task)
    try:
        return [t.schema() for t in runtime.tools_for("mcp").values()]
    finally:
        asyncio.run(runtime.aclose())


def test_init_model_copies_the_real_tokenizer_and_ties_a_small_embedding(task, real_models):
    """``rlf init-model`` copies the real files as they are and sizes a tied embedding to all 151,669 tokens."""
    from transformers import AutoConfig

    source = real_models.path("qwen3")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert _sha(task / "model" / name) == _sha(source / name), name
    config = AutoConfig.from_pretrained(task / "model", local_files_only=True)
    assert config.vocab_size == QWEN3_VOCABULARY and config.tie_word_embeddings
    assert (config.hidden_size, config.num_hidden_layers) == (32, 1)
    assert (config.eos_token_id, config.pad_token_id) == (151645, 151643)  # <|im_end|>, <|endoftext|>
    weights = (task / "model" / "model.safetensors").stat().st_size
    assert weights < 1.2 * QWEN3_VOCABULARY * 32 * 4  # one float32 embedding matrix (tied), not two


@pytest.mark.slow  # a fresh rlf process (torch, transformers, the 11 MB tokenizer) and an MCP server
def test_eval_of_the_random_model_with_the_calculator_has_no_error_stop(task, schemas):
    """``rlf eval`` on the real vocabulary: every prompt is the real template's rendering with the
    MCP calculator's schema, every generated token is in the loss mask, and nothing stops on an error."""
    from transformers import AutoTokenizer

    out = run_rlf("eval", "run.yaml", "--limit", "3", "--out", "eval.out.jsonl", cwd=task)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [json.loads(x) for x in (task / "eval.out.jsonl").read_text().splitlines()]
    assert len(lines) == 6
    hf = AutoTokenizer.from_pretrained(task / "model", local_files_only=True)
    for x in lines:
        assert x["stop_reason"] != "error" and x["error"] is None, (x["stop_reason"], x["error"])
        expected = hf.apply_chat_template([x["messages"][0]], tools=schemas, add_generation_prompt=True, tokenize=False)
        assert x["prompt_ids"] == hf(expected, add_special_tokens=False)["input_ids"]
        assert sum(x["response_mask"]) == x["generated_tokens"] > 0
        if x["tool_calls"] == 0:  # the usual case: one turn, all generated, sampled from the model
            assert all(x["response_mask"]) and all(lp < 0 for lp in x["logprobs"])
        else:  # a rare random call: its result is appended outside the mask
            assert 0 in x["response_mask"]
    assert "stop reasons" in out.stdout and "error" not in out.stdout.split("stop reasons")[1].splitlines()[0]


def _script(rows: list, thinking: bool) -> dict[str, list[str]]:
    """Per row: a calculator call, then the answer, as Qwen3 writes them (a ``<think>`` block first
    when thinking)."""

    def turn(thought: str, body: str) -> str:
        return f"<think>\n{thought}\n</think>\n\n{body}" if thinking else body

    out = {}
    for row in rows:
        expression = row.prompt[0]["content"].removeprefix("What is ").removesuffix("?")
        call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
        out[row.id] = [turn("I will use the calculator.", f"<tool_call>\n{call}\n</tool_call>"),
                       turn("The calculator has answered.", str(row.ground_truth))]  # fmt: skip
    return out


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
def test_tool_turns_on_the_tiny_models_tokenizer_are_exact(task, thinking):
    """Scripted calculator calls on the tiny model's own (real Qwen3) tokenizer, through ``rlf eval``'s
    code with the real MCP server: every call runs, the answer scores, the loss mask is exactly the
    generated tokens, and a full rendering of the recorded messages is the rollout (thinking on), or
    differs only in the empty ``<think>`` blocks Qwen3's template leaves out of earlier turns (off)."""
    from rlfcore.data import read_rows
    from rlfcore.engines.scripted import ScriptedEngine
    from rlfcore.evaluation import evaluate
    from rlfcore.sequences import REASONING_DROPPED

    runtime = _runtime(
        task,
        "rollout.n=1",
        "rollout.sampling.max_tokens=128",
        *([] if thinking else ["model.chat_template_kwargs.enable_thinking=false"]),
    )
    tok = runtime.tokenizer()
    assert tok.template == (task / "model" / "chat_template.jinja").read_text()
    rows = read_rows(task / "eval.jsonl", limit=4)
    script = _script(rows, thinking)

    async def go():
        engine = ScriptedEngine(tok, script)
        try:
            return await evaluate(runtime, engine, tok, rows)
        finally:
            await runtime.aclose()

    trajs, summary = asyncio.run(go())
    assert summary["stop_reasons"] == {"answer": 4} and summary["reward_mean"] == 1.0
    eos = tok.eos_token_ids[0]
    for t in trajs:
        assert (t.tool_calls, t.tool_errors, t.num_turns) == (1, 0, 2), t.messages
        masked = [i for i, m in zip(t.response_ids, t.response_mask) if m]
        assert masked == functools.reduce(operator.iadd, (tok.encode(s) + [eos] for s in script[t.row_id]), [])
        observed = tok.decode([i for i, m in zip(t.response_ids, t.response_mask) if not m])
        assert f"<tool_response>\n{t.messages[2]['content']}\n</tool_response>" in observed
        if thinking:
            assert t.template_mismatch is None, t.template_mismatch
            assert t.messages[1]["reasoning_content"] == "I will use the calculator."
        else:
            assert t.template_mismatch.startswith(REASONING_DROPPED), t.template_mismatch
            assert "reasoning_content" not in t.messages[1]
        assert isinstance(t.messages[1]["tool_calls"][0]["function"]["arguments"], dict)


def test_sft_masks_the_assistant_turns_as_the_model_generates_them(task):
    """On the tiny model's real Qwen3 tokenizer the SFT mask covers exactly the assistant turns as the
    model generates them: an empty ``<think>`` block first (thinking on), the call's arguments as an
    object, unescaped."""
    from rlfcore.chat import load_tokenizer
    from rlfcore.sequences import SequenceBuilder

    tok = load_tokenizer(str(task / "model"))
    demo = json.loads((task / "demos.jsonl").read_text().splitlines()[0])["messages"]
    seq = SequenceBuilder(tok).conversation(demo, None)
    spans, current = [], []
    for i, m in zip(seq.response_ids, seq.response_mask):
        if m:
            current.append(i)
        elif current:
            spans, current = spans + [current], []
    spans += [current] if current else []
    call = json.dumps({"name": "calculate", "arguments": demo[1]["tool_calls"][0]["function"]["arguments"]})
    empty = "<think>\n\n</think>\n\n"
    assert [tok.decode(s) for s in spans] == [f"{empty}<tool_call>\n{call}\n</tool_call><|im_end|>",
                                              f"{empty}{demo[3]['content']}<|im_end|>"]  # fmt: skip


@pytest.mark.slow  # a fresh rlf process; SFT and GRPO steps with a 151k-token output layer
def test_train_runs_sft_then_two_grpo_steps(task):
    """``rlf train`` on the real vocabulary: an SFT warm start whose first loss is that of a uniform
    guess over the whole real vocabulary (ln 151669 ≈ 11.93), then two GRPO steps with the random
    model's rollouts against the MCP calculator, no error stop in any sample."""
    import math

    out = run_rlf("train", "run.yaml", "--run-dir", "train-run", cwd=task)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = task / "train-run"
    [sft] = [json.loads(x) for x in (run / "sft_metrics.jsonl").read_text().splitlines()]
    assert abs(sft["loss"] - math.log(QWEN3_VOCABULARY)) < 0.5, sft
    assert (run / "checkpoints" / "sft" / "model" / "model.safetensors").exists()
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    for step in (1, 2):
        samples = [json.loads(x) for x in (run / "samples" / f"step_{step:06d}.jsonl").read_text().splitlines()]
        assert len(samples) == 4
        for s in samples:
            assert s["stop_reason"] != "error" and s["error"] is None, s["error"]
            assert sum(s["response_mask"]) == s["generated_tokens"] > 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_a_real_tokenizer_excludes_training_one_and_bad_folders_are_named(real_models, tmp_path):
    """``model.init.tokenizer`` with a trained tokenizer's settings is a config error naming both; a
    missing folder, a folder with no tokenizer and a tokenizer with no chat template are each named."""
    from rlfcore.backends.local.model import ensure_model
    from rlfcore.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config({"model": {"path": "m", "init": {"tokenizer": "tok", "texts": ["a.jsonl"], "vocab_size": 600}}})
    assert "model.init" in str(err.value) and "texts, vocab_size are for a tokenizer trained here" in str(err.value)

    def build(tokenizer: str) -> Path:
        config, _ = load_config({"model": {"path": str(tmp_path / "model"), "init": {"tokenizer": tokenizer, **SIZES}}})
        return ensure_model(config, tmp_path)

    with pytest.raises(FileNotFoundError, match=r"model.init.tokenizer: no such folder: .*nowhere"):
        build("nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="is not a tokenizer folder"):
        build("empty")
    bare = tmp_path / "bare"
    bare.mkdir()
    source = real_models.path("qwen3")
    shutil.copy(source / "tokenizer.json", bare)
    settings = json.loads((source / "tokenizer_config.json").read_text())
    del settings["chat_template"]
    (bare / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="has no chat template"):
        build(str(bare))
    assert not (tmp_path / "model").exists()  # nothing written before the folder is known to be good


def test_a_llama_tokenizer_with_no_pad_token_pads_with_its_end_of_turn(real_models, tmp_path):
    """Llama 3.1's tokenizer names ``<|eot_id|>`` as its eos and has no pad token: the model stops
    and pads on ``<|eot_id|>``, and the copy keeps Llama's template."""
    from transformers import AutoConfig

    from rlfcore.tinymodel import build_on_tokenizer

    out = build_on_tokenizer(real_models.path("llama3.1"), tmp_path / "llama", **SIZES)
    config = AutoConfig.from_pretrained(out, local_files_only=True)
    assert (config.vocab_size, config.eos_token_id, config.pad_token_id) == (128256, 128009, 128009)
    assert _sha(out / "tokenizer.json") == _sha(real_models.path("llama3.1") / "tokenizer.json")
