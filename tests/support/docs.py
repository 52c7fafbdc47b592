"""Reading rlf's docs: a page, its fenced code blocks, the hook sections of docs/hooks.md and the rows of
docs/config.md's reference tables; and running their commands from a fresh clone."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

DOCS = ROOT / "docs"
HOOK_HEADING = re.compile(r"^##[ \t]+`?([a-z_][a-z0-9_]*)`?[ \t]*$", re.MULTILINE)
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
FETCH = "rlf models fetch smollm2-135m-instruct"
FETCHED = "~/.cache/rlf/models/smollm2-135m-instruct-float32"
"""The folder the fetch writes with no ``$RLF_MODELS`` (checked against rlfcore.models below)."""


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


def words(command: str) -> list[str]:
    """A shell command's words, as bash splits them (a trailing ``# comment`` dropped)."""
    return shlex.split(command, comments=True)


def clone_files() -> list[str]:
    """The files a clone would have: git's tracked files and the untracked ones it does not ignore."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: cannot tell the repository's files from what runs left")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if (ROOT / name).is_file()]  # a deleted tracked file is gone


def fresh_clone(dest: Path) -> Path:
    """The files a clone would have (the work tree's versions), copied to ``dest``."""
    for name in clone_files():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


def fetched_folder(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where ``rlf models fetch smollm2-135m-instruct`` puts SmolLM2 for this ``home``: the READMEs' path."""
    from rlfcore.models import KNOWN, default_path

    monkeypatch.delenv("RLF_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(home))
    folder = default_path(KNOWN["smollm2-135m-instruct"], "float32")
    assert folder == Path(FETCHED).expanduser(), f"the fetch writes {folder}, the READMEs say {FETCHED}"
    return folder
