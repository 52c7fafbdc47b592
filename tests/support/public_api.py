"""What a plugin may import from rlfcore, and where its imports are: shared by the public-API checks of the
plugins and of the plugin that ``rlf plugins new`` writes."""

from __future__ import annotations

import ast
from pathlib import Path

import rlfcore
import rlfcore.testing

KIT = {"rlfcore": set(rlfcore.__all__), "rlfcore.testing": set(rlfcore.testing.__all__), "rlfcore.cli": {"cli"}}
"""What a plugin's tests and benchmarks (not its shipped code) may import: the public API, the test kit
and the ``rlf`` command's click group (the console script's target), to run it in-process."""


def rlfcore_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Each import of rlfcore in the file at ``path``: its line, the module, and the names (none for ``import``)."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.module, [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rlfcore"
    ] + [
        (node.lineno, alias.name, [])
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("rlfcore.")
    ]


def plugin_files(plugin: Path) -> list[Path]:
    """The plugin's own Python files: none in a hidden folder (rlf-verifiers' ``.site``, where its
    install script puts verifiers and its dependencies, thousands of files that are not the plugin's)."""
    return [p for p in plugin.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(plugin).parts)]


def shipped_files(plugin: Path) -> list[Path]:
    """The Python files a plugin ships: all but its tests and benchmarks."""
    return [p for p in plugin_files(plugin) if p.parts[len(plugin.parts)] not in ("tests", "benchmarks")]
