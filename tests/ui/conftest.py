"""The run folders the ``rlf ui`` tests share (:func:`tests.support.ui.make_ui_world`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.ui import make_ui_world


@pytest.fixture(scope="module")
def ui_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A runs folder with a finished run, a live one, and runs with a token mismatch, tool timeouts and a
    failed reward; one per module, as tests change it (a step appended to the live run)."""
    return make_ui_world(tmp_path_factory.mktemp("ui"))
