"""``rlf ui``: a local web app over run folders (the optional extra ``rlfcore[ui]``).

It reads run folders and changes them only through its launch page; see docs/ui.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette


def create_app(*args: Any, **kwargs: Any) -> Starlette:
    """The Starlette app; imported here lazily so ``import rlfcore.ui`` stays cheap."""
    from rlfcore.ui.app import create_app as build

    return build(*args, **kwargs)
