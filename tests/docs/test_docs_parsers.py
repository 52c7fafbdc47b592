"""docs/config.md names every tool-call parser the core registers, as ``rlf plugins list --all`` shows them."""

from __future__ import annotations

from rlfcore.catalog import describe
from rlfcore.plugins import PluginManager
from tests.support.docs import config_rows, read_doc


def builtin_parsers() -> set[str]:
    """The parser names the built-in plugins register, found as ``rlf plugins list --all`` finds them."""
    manager = PluginManager()
    manager.discover()
    return {name for info in describe(manager) if info.source == "builtin" for name in info.parsers}


def test_the_parser_row_names_every_built_in_parser():
    parsers = builtin_parsers()
    assert {"hermes", "llama3-json"} < parsers  # the registry was read, not an empty answer
    _, _, description = config_rows(read_doc("config.md"))["rollout.parser"][:3]
    missing = sorted(p for p in parsers if f"`{p}`" not in description)
    assert not missing, f"docs/config.md's rollout.parser row does not name the built-in parsers {', '.join(missing)}"
