"""LoRA in the local trainer (``trainer.lora``): only adapters train, the reference is the base with the
adapters off (no second copy), the engine samples with the adapters as they train, checkpoints hold
the adapter and resume, and ``rlf models merge`` writes a plain model folder.

Models are tiny Qwen3 models built here from the tests' own text (no hub).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from rlfcore import hookimpl
from rlfcore.backends.local import grpo, lora
from rlfcore.data import normalize_row
from rlfcore.engines.base import SamplingParams
from rlfcore.testing import make_runtime
from tests.support.rlf import run_rlf
from tests.support.samples import TINY_SIZES

pytest.importorskip("peft")

ROWS = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(4)]
SIZES = {**TINY_SIZES, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128}
"""A little wider than the smallest model, so that the adapters (rank 4) are a small part of it."""


class Parity:
    """A reward that varies within every group of a random model: the response length's parity."""

    @hookimpl
    def compute_score(self, sample: Any) -> float:
        return float(len(sample.response) % 2)


def _config(**trainer: Any) -> dict[str, Any]:
    return {
        "plugins": ["parity"],
        "seed": 2,
        "model": {"path": "model", "init": {"texts": ["rows.jsonl"], **SIZES}},
        "rollout": {"n": 4, "max_turns": 1, "sampling": {"max_tokens": 8, "temperature": 1.0}},
        "trainer": {
            "steps": 2,
            "prompts_per_step": 2,
            "lr": 0.05,
            "micro_batch_size": 8,
            "samples_per_step": 0,
            "lora": {"rank": 4, "alpha": 8},
            **trainer,
        },
        "engine": {"device": "cpu"},
    }


def _trainer(tmp_path: Path, **trainer: Any) -> Any:
    """A LocalTrainer on the tiny model of ``tmp_path`` (built on first use), as ``rlf train`` makes it."""
    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import ensure_model, start_policy
    from rlfcore.backends.local.rundir import RunDir

    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    runtime = make_runtime(_config(**trainer), {"parity": Parity()})
    base = ensure_model(runtime.config, tmp_path)
    model, hf_tok = start_policy(runtime.config, base, base)
    torch.manual_seed(0)
    rows = [normalize_row(r, i) for i, r in enumerate(ROWS)]
    return LocalTrainer(runtime, model, hf_tok, rows, RunDir(tmp_path / "run"))


def _logprobs(model: Any, ids: list[int], n_prompt: int) -> torch.Tensor:
    """The logprobs of ``ids[n_prompt:]`` under ``model``, as the trainer computes them."""
    batch = grpo.collate([ids[:n_prompt]], [ids[n_prompt:]], [[1] * (len(ids) - n_prompt)], pad_id=0)
    with torch.no_grad():
        return grpo.token_logprobs(model.eval(), batch)[0, n_prompt - 1 :]


def test_a_step_changes_only_the_adapters_and_keeps_one_copy_of_the_weights(tmp_path, monkeypatch):
    import copy

    deepcopy = copy.deepcopy

    def no_model_copy(value: Any, *args: Any) -> Any:
        assert not isinstance(value, torch.nn.Module), "LoRA must not copy the model for its reference"
        return deepcopy(value, *args)

    monkeypatch.setattr(copy, "deepcopy", no_model_copy)
    trainer = _trainer(tmp_path, kl_coef=0.1)
    model = trainer.model
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    adapters = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    assert adapters and all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())
    optimized = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert optimized == {id(p) for n, p in model.named_parameters() if "lora_" in n}
    # one copy: the engine samples from the very parameters the trainer updates, and there is no reference model
    assert trainer.reference is None
    assert {id(p) for p in trainer.engine.model.parameters()} == {id(p) for p in model.parameters()}

    m1 = trainer.train_step()
    m2 = trainer.train_step()
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], p) for n, p in base.items()), "a base weight changed"
    assert any(not torch.equal(after[n], p) for n, p in adapters.items()), "no adapter weight changed"
    assert m1["grad_norm"] > 0 and m1["kl"] == 0.0  # fresh adapters (B = 0): the policy is still the base
    assert m2["kl"] > 0  # the KL term sees the adapters' change against the base


def test_the_reference_is_the_base_model_and_the_engine_samples_with_the_trained_adapter(tmp_path):
    from rlfcore.backends.local.model import load_policy

    trainer = _trainer(tmp_path, kl_coef=0.1, steps=3)
    trainer.train_step()
    trainer.train_step()
    model = trainer.model
    prompt = trainer.tok.encode("Say something about 7.")
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=5)
    out = trainer.runtime.run(trainer.engine.generate(prompt, params))
    ids = prompt + out.token_ids
    engine = torch.tensor(out.logprobs)
    on = _logprobs(model, ids, len(prompt))
    with lora.reference(model) as reference:
        off = _logprobs(reference, ids, len(prompt))
    fresh, _ = load_policy(tmp_path / "model", "cpu")
    assert torch.allclose(off, _logprobs(fresh, ids, len(prompt)), atol=1e-6)  # adapters off: the base model
    assert (on - off).abs().max() > 1e-2  # the adapters have learnt something...
    assert (engine - on).abs().max() < 1e-4  # ...and the engine samples with them
    m3 = trainer.train_step()
    assert m3["logprob_drift"] < 1e-4  # the engine's samples of this step came from the updated adapters


def test_a_checkpoint_holds_the_adapter_and_merges_into_a_plain_model(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlfcore.cli import cli

    trainer = _trainer(tmp_path)
    trainer.train_step()
    trainer.train_step()
    trainer.save()
    checkpoint = trainer.run_dir.checkpoints / "step_000002"
    files = {p.name for p in (checkpoint / "model").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= files
    assert "model.safetensors" not in files
    adapter_bytes = (checkpoint / "model" / "adapter_model.safetensors").stat().st_size
    assert adapter_bytes < (tmp_path / "model" / "model.safetensors").stat().st_size / 4

    out = tmp_path / "merged"
    result = CliRunner().invoke(cli, ["models", "merge", str(checkpoint), str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(str(out))
    assert not (out / "adapter_config.json").exists() and (out / "tokenizer.json").is_file()
    assert not list(tmp_path.glob(".merged.tmp*"))

    ids = torch.tensor([trainer.tok.encode("Say something about 3.")])
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tmp_path / "model"), checkpoint / "model"
    )
    with torch.no_grad():
        expected = peft_model.eval()(input_ids=ids).logits
    # a fresh process loads the merged folder without peft, and computes the peft model's logits
    script = (
        "import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}).eval(); AutoTokenizer.from_pretrained({str(out)!r})\n"
        f"logits = m(input_ids=torch.tensor({ids.tolist()})).logits\n"
        "assert 'peft' not in sys.modules, 'peft was imported'\n"
        "print(json.dumps(logits.tolist()))\n"
    )
    done = subprocess.run([sys.executable, "-c", "import json\n" + script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    merged = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    assert torch.allclose(merged, expected, atol=1e-5), (merged - expected).abs().max()

    # --base: another copy of the base model, here in bfloat16, which the merged model keeps
    AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=torch.bfloat16).save_pretrained(tmp_path / "bf16")
    half = CliRunner().invoke(
        cli, ["models", "merge", str(checkpoint), str(tmp_path / "m16"), "--base", str(tmp_path / "bf16")]
    )
    assert half.exit_code == 0, half.output
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "m16").dtype == torch.bfloat16
    assert (tmp_path / "m16" / "tokenizer.json").is_file()  # from the checkpoint, which has it

    again = CliRunner().invoke(cli, ["models", "merge", str(checkpoint), str(out)])
    assert again.exit_code != 0 and "exists" in again.output
    whole = CliRunner().invoke(cli, ["models", "merge", str(tmp_path / "model"), str(tmp_path / "x")])
    assert whole.exit_code != 0 and "whole model already" in whole.output


def test_lora_sft_then_grpo_resumes_as_an_uninterrupted_run(tmp_path):
    """``rlf train`` with LoRA: the SFT warm start trains the adapters, GRPO continues them, checkpoints
    hold them, and a run stopped after 2 steps and resumed gives the numbers of one that was not."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    demos = [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": "A"}]} for r in ROWS
    ]
    (tmp_path / "demos.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
    (tmp_path / "parity.py").write_text(
        "from rlfcore import hookimpl\n\n@hookimpl\ndef compute_score(sample):\n    return float(len(sample.response) % 2)\n"
    )
    config = _config(steps=4, checkpoint_every=2)
    config.update(plugins=[], local_plugins=["parity.py"], data={"train": "rows.jsonl"})
    config["sft"] = {"data": "demos.jsonl", "steps": 2, "batch_size": 2, "lr": 0.01}
    config["model"]["init"]["texts"].append("demos.jsonl")
    (tmp_path / "run.yaml").write_text(json.dumps(config))

    full = run_rlf("train", "run.yaml", "--run-dir", "full", cwd=tmp_path)
    assert full.returncode == 0, full.stdout + full.stderr
    for name in ("sft", "step_000002", "step_000004"):
        assert (tmp_path / "full" / "checkpoints" / name / "model" / "adapter_model.safetensors").is_file(), name
    part = run_rlf("train", "run.yaml", "trainer.steps=2", "--run-dir", "part", cwd=tmp_path)
    assert part.returncode == 0, part.stderr
    resumed = run_rlf("train", "run.yaml", "--run-dir", "part", "--resume", "trainer.steps=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    def metrics(run: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    a, b = metrics("full"), metrics("part")
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        for key in ("reward_mean", "loss", "grad_norm", "response_length", "lr"):
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-7), (x["step"], key)
    assert a[-1]["logprob_drift"] < 1e-4
    # a resume with other adapters is refused: they would continue another run
    other = run_rlf("train", "run.yaml", "trainer.lora.rank=8", "--run-dir", "part", "--resume", cwd=tmp_path)
    assert other.returncode != 0 and "trainer.lora.rank" in other.stderr


def test_target_modules_that_match_no_layer_are_an_error_naming_the_setting(tmp_path):
    with pytest.raises(lora.LoraError, match="trainer.lora.target_modules"):
        _trainer(tmp_path, lora={"target_modules": ["no_such_proj"]})


def test_the_verl_backend_trains_the_same_lora_through_verls_own_settings(tmp_path):
    """trainer.lora reaches verl as its actor's lora_rank, lora_alpha and target_modules, through verl's
    real config composition; a dropout verl cannot honour is refused, not dropped."""
    from rlfcore.backends.verl.hydra import compose, refusals, verl_overrides
    from rlfcore.config import RunConfig

    config = RunConfig.model_validate({"model": {"path": str(tmp_path)}, "trainer": {"lora": {"rank": 8, "alpha": 16}}})
    assert not refusals(config)
    rows = tmp_path / "rows.parquet"
    model = compose(verl_overrides(config, tmp_path / "run.yaml", rows)).actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha) == (8, 16) and "q_proj" in model.target_modules
    refused = refusals(RunConfig.model_validate({"trainer": {"lora": {"dropout": 0.1}}}))
    assert [r for r in refused if r.startswith("trainer.lora.dropout:")]


def test_the_verl_backend_starts_from_the_lora_warm_start_folded_into_its_base(tmp_path):
    """With ``sft.data`` and ``trainer.lora``, rlf's warm start saves an adapter alone; verl loads whole
    models, so it is given the adapter folded into its base (``checkpoints/sft/merged``), and a resume
    keeps that folder instead of training the warm start again."""
    from rlfcore.backends.verl.launch import Plan, make_model, sft_model_path

    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    demos = [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": "A"}]} for r in ROWS
    ]
    (tmp_path / "demos.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
    config = _config()
    config.update(plugins=[], data={"train": "rows.jsonl"})
    config["sft"] = {"data": "demos.jsonl", "steps": 2, "batch_size": 2, "lr": 0.01}
    config["model"]["init"]["texts"].append("demos.jsonl")
    (tmp_path / "run.yaml").write_text(json.dumps(config))
    run = tmp_path / "run"
    merged = sft_model_path(run, lora=True)
    assert merged == run.resolve() / "checkpoints" / "sft" / "merged"
    plan = Plan([], None, run / "train.parquet", None, run, [], merged)  # make_model reads no verl config

    make_model(tmp_path / "run.yaml", [], plan, resume=False)
    adapter = run / "checkpoints" / "sft" / "model"
    assert (adapter / "adapter_model.safetensors").is_file() and not (adapter / "config.json").exists()
    assert (merged / "config.json").is_file() and (merged / "tokenizer_config.json").is_file()
    from transformers import AutoModelForCausalLM

    base, folded = (AutoModelForCausalLM.from_pretrained(p) for p in (tmp_path / "model", merged))
    assert any(not torch.equal(a, b) for a, b in zip(base.parameters(), folded.parameters()))  # the warm start is in
    stamp = (merged / "config.json").stat().st_mtime_ns
    make_model(tmp_path / "run.yaml", [], plan, resume=True)
    assert (merged / "config.json").stat().st_mtime_ns == stamp  # kept, not trained again
