"""Training backends, each behind :class:`~rlfcore.backends.base.Backend` and picked by name
(``rlf train --backend NAME``). Each lives in its own subpackage and imports its engine (torch,
verl) only when used, so ``rlfcore`` itself never depends on one."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlfcore.backends.base import Backend

BACKENDS = {
    "local": ("rlfcore.backends.local.backend", "LocalBackend", "one process, CPU or one GPU"),
    "verl": ("rlfcore.backends.verl.backend", "VerlBackend", "Ray, FSDP, vLLM/SGLang rollout, many GPUs"),
}
"""Each backend's name: its module, class and one line for ``--help`` (read without importing it)."""


def get_backend(name: str) -> Backend:
    """The backend called ``name``; a ``KeyError`` listing the known ones otherwise."""
    if name not in BACKENDS:
        raise KeyError(f"no backend named {name!r}; known: {', '.join(BACKENDS)}")
    module, cls, _ = BACKENDS[name]
    backend: Backend = getattr(import_module(module), cls)()
    return backend
