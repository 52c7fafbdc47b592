"""Sandboxes with small limits, so hostile code is stopped fast and nothing it does can reach far."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from code_sandbox_support import SMALL
from rlf_code.layers import Layers, detect
from rlf_code.pool import Pool
from rlf_code.sandbox import Sandbox


@pytest.fixture(scope="session")
def layers() -> Layers:
    return detect()


@pytest.fixture(scope="session")
def full(layers: Layers) -> Layers:
    """The layers the hostile tests need: they only run where every one is available (root on Linux)."""
    if not (layers.own_uid and layers.namespaces and layers.cgroups):
        pytest.skip(f"needs every sandbox layer ({layers.describe(network=False)})")
    return layers


@pytest.fixture
def sandbox(layers: Layers) -> Iterator[Sandbox]:
    box = Sandbox(SMALL, layers).start()
    yield box
    box.close()


@pytest.fixture
def pool(layers: Layers) -> Iterator[Pool]:
    warm = Pool(lambda: Sandbox(SMALL, layers), size=2)
    yield warm
    warm.close()
