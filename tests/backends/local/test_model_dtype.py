"""``model.dtype`` means one thing in the engine and in training, on a real (tiny) bfloat16 checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rlfcore.backends.local.model import load_policy  # noqa: E402
from rlfcore.engines.transformers import TransformersEngine, resolve_dtype  # noqa: E402


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory) -> Path:
    """A tiny model saved in bfloat16, as most released checkpoints are."""
    from transformers import AutoModelForCausalLM

    from rlfcore.tinymodel import build_tiny

    path = build_tiny(
        ["What is 2 plus 3? The answer is 5."] * 10, tmp_path_factory.mktemp("bf16") / "model", vocab_size=280
    )
    AutoModelForCausalLM.from_pretrained(path).to(torch.bfloat16).save_pretrained(path)
    return path


@pytest.mark.parametrize("dtype, expected", [("auto", "float32"), ("float32", "float32"), ("bfloat16", "bfloat16")])
def test_engine_and_training_load_the_same_dtype(bf16_checkpoint, dtype, expected):
    engine = TransformersEngine.from_pretrained(str(bf16_checkpoint), device="cpu", dtype=dtype)
    policy, _ = load_policy(bf16_checkpoint, "cpu", dtype)
    assert engine.model.dtype == policy.dtype == getattr(torch, expected)


def test_an_unknown_dtype_is_named():
    with pytest.raises(ValueError, match=r"model.dtype: 'float8' is not one of auto, float32, bfloat16, float16"):
        resolve_dtype("float8")
