"""What the sandbox tests share: small limits, so hostile code is stopped fast and cannot reach far, and
the fixtures that start sandboxes with them. A module, not a conftest.py: a second ``conftest`` module
would shadow the repository's tests/conftest.py, which other tests import by that name."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rlf_code.layers import Layers, detect
from rlf_code.pool import Pool
from rlf_code.sandbox import Sandbox
from rlf_code.settings import Limits

SMALL = Limits(call_timeout_s=3, cpu_s=20, memory_mb=512, file_size_mb=8, disk_mb=32, processes=32)


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
