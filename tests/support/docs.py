"""Reading rlf's docs: a page, its fenced code blocks, the hook sections of docs/hooks.md and the rows of
docs/config.md's reference tables."""

from __future__ import annotations

import re

from tests.support import ROOT

DOCS = ROOT / "docs"
HOOK_HEADING = re.compile(r"^##[ \t]+`?([a-z_][a-z0-9_]*)`?[ \t]*$", re.MULTILINE)
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def read_doc(name: str) -> str:
    """The text of ``docs/NAME``; fails the test when the page is missing."""
    path = DOCS / name
    assert path.is_file(), f"{path} is missing"
    return path.read_text()


def code_blocks(text: str, lang: str) -> list[str]:
    """The bodies of the fenced blocks of language ``lang`` in ``text``, in order."""
    return [body for kind, body in FENCE.findall(text) if kind == lang]


def _outside_code(text: str) -> str:
    """``text`` with the inside of fenced blocks blanked, so a ``# comment`` there is no heading."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def hook_sections(text: str) -> dict[str, str]:
    """The body of each hook section, by hook name (a section ends at the next level-1 or -2 heading)."""
    prose = _outside_code(text)
    ends = [m.start() for m in re.finditer(r"^#{1,2}[ \t]", prose, re.MULTILINE)] + [len(text)]
    sections: dict[str, str] = {}
    for match in HOOK_HEADING.finditer(prose):
        name = match.group(1)
        assert name not in sections, f"docs/hooks.md has two sections for {name!r}"
        end = min(e for e in ends if e > match.start())
        sections[name] = text[match.end() : end]
    return sections


def config_rows(text: str) -> dict[str, list[str]]:
    """Reference-table rows by key: ``| `dotted.key` | type | default | description |``."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"^\|\s*`([a-z_][a-z0-9_.]*)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in match.group(2).split("|")]
    return rows
