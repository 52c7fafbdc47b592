"""``trainer.max_staleness``: asynchronous GRPO in the local trainer.

The importance weights and the staleness bound are checked on hand-made trajectories whose behaviour
logprobs are known; the engine's per-token versions and cut logprobs on a real tiny model; the whole
run (the calculator MCP server, ``rlf train`` and ``--resume``) from the records it leaves.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from rlfcore import hookimpl
from rlfcore.backends.local import grpo
from rlfcore.data import normalize_row
from rlfcore.loop import Trajectory
from rlfcore.schema import ConfigError
from tests.support import ROOT
from tests.support.rlf import run_rlf
from tests.support.samples import TINY_SIZES

EXAMPLE = ROOT / "examples" / "calculator"


class Flat:
    @hookimpl
    def compute_score(self, sample: Any) -> float:
        return 0.0


def _trainer(tmp_path: Path, **trainer: Any) -> Any:
    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import ensure_model, load_policy, tool_schemas
    from rlfcore.backends.local.rundir import RunDir
    from rlfcore.testing import make_runtime

    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(8)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "plugins": ["flat"],
        "seed": 0,
        "model": {"path": "model", "init": {"texts": ["rows.jsonl"], **TINY_SIZES}},
        "rollout": {"n": 2, "max_turns": 1, "sampling": {"max_tokens": 4}},
        "trainer": {"steps": 2, "prompts_per_step": 2, "max_staleness": 1, **trainer},
        "engine": {"device": "cpu"},
    }
    runtime = make_runtime(config, {"flat": Flat()})
    model, hf_tok = load_policy(ensure_model(runtime.config, tmp_path, tool_schemas(runtime)), "cpu")
    rows_in = [normalize_row(r, i) for i, r in enumerate(rows)]
    return LocalTrainer(runtime, model, hf_tok, rows_in, RunDir(tmp_path / "run"))


def _stale(trainer: Any, behaviour: float, age: int) -> list[Trajectory]:
    """Two groups of two samples, rewards 1 and 0, sampled ``age`` updates ago with logprob ``behaviour``."""
    out = []
    prompt = trainer.tok.encode("Say something.")
    for g in range(2):
        for k in range(2):
            response = [5 + g, 6 + k, 7, 8]
            out.append(
                Trajectory(
                    id=f"g{g}#{k}",
                    row_id=f"g{g}",
                    env=None,
                    messages=[],
                    prompt_ids=prompt,
                    response_ids=response,
                    response_mask=[1] * len(response),
                    logprobs=[behaviour] * len(response),
                    policy_versions=[trainer.step - age] * len(response),
                    kept_logmass=[0.0] * len(response),
                    reward=float(k == 0),
                )
            )
    return out


def test_importance_weights_are_truncated_or_masked_at_the_bound():
    old = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    behaviour = torch.tensor([[0.0, -math.log(3), math.log(3), -0.5]])  # weights 1, 3, 1/3, e^0.5
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    tis, tis_beyond = grpo.importance_weights(old, behaviour, mask, "tis", 2.0)
    assert torch.allclose(tis, torch.tensor([[1.0, 2.0, 1 / 3, 0.0]]))
    assert tis_beyond.tolist() == [[False, True, False, False]]
    mis, mis_beyond = grpo.importance_weights(old, behaviour, mask, "mis", 2.0)
    assert torch.allclose(mis, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert mis_beyond.tolist() == [[False, True, True, False]]


@pytest.mark.parametrize("kind", ["tis", "mis"])
def test_a_step_weighs_tokens_an_older_policy_sampled(tmp_path: Path, kind: str):
    """Behaviour logprobs of -100 make every weight huge: TIS trains each token at the bound, MIS
    drops them all (no loss, no gradient), and the step's figures say so."""
    trainer = _trainer(tmp_path, importance_correction=kind, importance_bound=2.0)
    trainer.step = trainer.engine.policy_version = 1
    metrics = trainer._update(_stale(trainer, behaviour=-100.0, age=1))
    assert metrics["staleness/1"] == 1.0 and metrics["staleness_max"] == 1.0
    assert metrics["is_beyond_bound"] == 1.0
    assert metrics["is_gap_max"] == pytest.approx(20.0)  # the gap is clamped where the weight is
    if kind == "tis":
        assert metrics["is_weight_mean"] == pytest.approx(2.0)
        assert metrics["grad_norm"] > 0
    else:
        assert metrics["is_weight_mean"] == 0.0
        assert metrics["loss"] == 0.0 and metrics["grad_norm"] == 0.0
    assert trainer.engine.policy_version == 2


def test_tokens_older_than_the_bound_stop_the_step(tmp_path: Path):
    trainer = _trainer(tmp_path)
    trainer.step = trainer.engine.policy_version = 3
    with pytest.raises(RuntimeError, match="2 updates old, beyond trainer.max_staleness"):
        trainer._update(_stale(trainer, behaviour=-1.0, age=2))


def test_the_engine_records_each_tokens_version_and_the_cut_it_was_drawn_from(tmp_path: Path):
    """New weights announced mid-turn reach the row at its next decode step: the turn spans versions.
    ``logprobs - kept_logmass`` is the logprob under the top-p cut, as the trainer computes it."""
    from rlfcore.engines.base import SamplingParams
    from rlfcore.engines.sampling import cut_logprobs

    trainer = _trainer(tmp_path)
    engine = trainer.engine
    forward, calls = engine._forward, []

    def bump_after_five(*args: Any) -> Any:  # runs under weights_lock, as a trainer's update does
        calls.append(1)
        if len(calls) == 5:
            engine.policy_version = 7
        return forward(*args)

    engine._forward = bump_after_five
    prompt = trainer.tok.encode("Say something about 3.")
    params = SamplingParams(temperature=1.0, top_p=0.7, max_tokens=12, seed=3)
    gen = asyncio.run(engine.generate(prompt, params, request_id="x#0"))
    assert len(gen.token_ids) == 12
    assert gen.versions == [0] * 4 + [7] * 8  # the 5th forward (prefill + 4 decode steps) ran with version 7
    with torch.no_grad():
        logits = trainer.model(input_ids=torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
    want = cut_logprobs(torch.log_softmax(logits.float(), -1), torch.tensor(gen.token_ids), -1, 0.7)
    got = torch.tensor(gen.logprobs) - torch.tensor(gen.kept_logmass)
    assert torch.allclose(got, want, atol=1e-4)
    assert any(k < -1e-3 for k in gen.kept_logmass)  # the cut did remove mass: the check is not vacuous


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.resample_zero_variance=2", "dynamic sampling draws rows that a later step"),
        ("agent.entry=x:y", "asynchronous GRPO runs rlf's own loop"),
    ],
)
def test_settings_asynchronous_training_cannot_honour_are_refused(override: str, message: str):
    from rlfcore.config import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(str(EXAMPLE / "run.yaml"), ["trainer.max_staleness=1", override])


def test_too_few_rows_for_the_steps_in_flight_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match=r"2 steps of 2 rows roll out at once, and the data has 3 rows"):
        trainer = _trainer(tmp_path)
        trainer.rows = trainer.rows[:3]
        from rlfcore.backends.local import asynchronous

        asynchronous.check(trainer)


def test_verl_takes_a_staleness_of_one_with_truncated_weights_only():
    from rlfcore.backends.verl.hydra import refusals
    from rlfcore.config import load_config

    def refused(*overrides: str) -> list[str]:
        config, _ = load_config(str(EXAMPLE / "run.yaml"), list(overrides))
        return [line.split(":")[0] for line in refusals(config) if line.startswith("trainer.")]

    assert refused("trainer.max_staleness=1") == []
    assert refused("trainer.max_staleness=2") == ["trainer.max_staleness (2)"]
    assert refused("trainer.max_staleness=1", "trainer.importance_correction=mis") == ["trainer.importance_correction"]


@pytest.mark.slow
def test_an_asynchronous_run_keeps_its_bound_in_the_records_and_resumes(tmp_path: Path):
    """The embedded task with the real calculator server: every generated token of every saved sample
    was sampled at most one update before the step that trained on it, some exactly one (the
    rollouts did overlap), the correction's figures are logged, and ``--resume`` goes on."""
    run = tmp_path / "run"
    common = ["sft.steps=0", "trainer.max_staleness=1", "trainer.kl_coef=0.01", "trainer.checkpoint_every=2"]
    first = run_rlf(
        "train", str(EXAMPLE / "run.yaml"), *common, "trainer.steps=4", "trainer.samples_per_step=64",
        "--run-dir", str(run), timeout=600,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    ages = []
    for step in range(1, 5):
        for line in (run / "samples" / f"step_{step:06d}.jsonl").read_text().splitlines():
            sample = json.loads(line)
            assert len(sample["policy_versions"]) == len(sample["response_ids"])
            ages += [step - 1 - v for v, m in zip(sample["policy_versions"], sample["response_mask"]) if m]
    assert ages and max(ages) <= 1 and min(ages) >= 0
    assert 1 in ages
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(m["staleness_max"] <= 1 and "is_gap_mean" in m and "wait_s" in m for m in metrics)
    resumed = run_rlf("train", "--run-dir", str(run), "--resume", "trainer.steps=6", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("refill", [True, False])
def test_rows_are_prefilled_again_when_the_weights_change_under_them(tmp_path: Path, refill: bool):
    """The weights change between two decode steps, as an asynchronous update changes them. With
    ``refill_on_new_weights`` every token sampled after the change has the new model's logprob over its
    whole context; without it, the row goes on from keys and values the old weights computed, and its
    logprobs are neither model's."""
    from rlfcore.engines.base import SamplingParams

    trainer = _trainer(tmp_path)
    engine, model = trainer.engine, trainer.model
    engine.refill_on_new_weights = refill
    step, steps = engine._decode_step, []

    def then_new_weights(*args: Any) -> bool:  # the trainer's update, between two steps
        going = step(*args)
        steps.append(1)
        if len(steps) == 4:
            g = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=g))
            engine.policy_version = 1
        return going

    engine._decode_step = then_new_weights
    prompt = trainer.tok.encode("Say something about 3.")
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=3, stop_token_ids=[])
    gen = asyncio.run(engine.generate(prompt, params, request_id="x#0"))
    assert len(gen.token_ids) == 12 and engine.stats.refills == (1 if refill else 0)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
    new = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)
    after = slice(4, None)  # the 5th token on was sampled after the change
    drift = (torch.tensor(gen.logprobs)[after] - new[after]).abs().max().item()
    assert (drift < 1e-4) if refill else (drift > 1e-3), drift
