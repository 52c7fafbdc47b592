"""The plugins' READMEs run as printed, from a fresh clone.

Each case runs every command of the bash blocks of one README section, in order and exactly as
printed, with bash, from the root of a copy of the repository's files (git's tracked files and the
untracked ones it does not ignore: nothing an earlier run left behind counts), with the shared data
folder at ``../shared/data`` beside it when a command reads it there. So an output path that is not
where the example config reads it, a config naming a model nobody has, or a data file no command
makes fails here.

The real pretrained model the READMEs offer, SmolLM2 fetched by ``rlf models fetch
smollm2-135m-instruct``, is a 93 MB download and minutes of CPU a command: that fetch is left to
tests/models/test_real_model.py, and the commands naming the folder it writes run as printed with a
tiny model standing in at that path, under a home folder of the test's own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlfcore.testing import build_tiny
from tests.support import ROOT
from tests.support.docs import FENCE, FETCH, fetched_folder, fresh_clone, words

PLUGINS = ROOT / "plugins"
CASES = {
    "deepsearch-hotpotqa": ("rlf-deepsearch", "## Use", "rlf_deepsearch"),
    "nl2sql-shop": ("rlf-nl2sql", "## Use it", "rlf_nl2sql"),
    "nl2sql-geoquery": ("rlf-nl2sql", "### GeoQuery", "rlf_nl2sql"),
    "code-gsm8k": ("rlf-code", "### GSM8K as program of thought", "rlf_code"),
    "code-humaneval": ("rlf-code", "### HumanEval with a real model", "rlf_code"),
}
"""Case: (plugin folder, the section's heading line, the plugin's module)."""


def section(text: str, heading: str) -> str:
    """The part of a README under ``heading``, up to the next heading of any level outside code."""
    prose = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    starts = [m.start() for m in re.finditer(rf"^{re.escape(heading)}[ \t]*$", prose, re.MULTILINE)]
    assert len(starts) == 1, f"expected one heading {heading!r}, found {len(starts)}"
    after = starts[0] + len(heading)
    following = re.search(r"^#{1,6}[ \t]", prose[after:], re.MULTILINE)
    return text[after : after + following.start() if following else len(text)]


def shell_commands(text: str) -> list[str]:
    """The commands of ``text``'s bash blocks, continuation lines joined, comment lines dropped."""
    out: list[str] = []
    for kind, body in FENCE.findall(text):
        if kind == "bash":
            joined = re.sub(r"\\\n[ \t]*", " ", body)
            out += [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return out


def config_commands(path: Path) -> list[str]:
    """The ``rlf`` commands an example config's comments print (``#   rlf ...``, continuations joined)."""
    comments = "\n".join(line[1:] for line in path.read_text().splitlines() if line.startswith("#"))
    joined = re.sub(r"\\\n[ \t]*", " ", comments)
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("rlf ")]


def test_the_fetched_models_folder_is_where_the_readmes_say(tmp_path, monkeypatch):
    assert fetched_folder(tmp_path, monkeypatch) == tmp_path / ".cache/rlf/models/smollm2-135m-instruct-float32"


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_readme_section_runs_as_printed_from_a_fresh_clone(case, tmp_path, monkeypatch, request):
    plugin, heading, module = CASES[case]
    pytest.importorskip(module)
    commands = shell_commands(section((PLUGINS / plugin / "README.md").read_text(), heading))
    assert commands, f"plugins/{plugin}/README.md section {heading!r} prints no command"
    clone = fresh_clone(tmp_path / "work" / "rlf")
    if any("../shared/data" in c for c in commands):
        (tmp_path / "work" / "shared").mkdir()
        (tmp_path / "work" / "shared" / "data").symlink_to(request.getfixturevalue("shared_data"))
    home = tmp_path / "home"
    texts = ["SELECT 1;", "<answer>Paris</answer>", '<tool_call>{"name": "search"}</tool_call>']
    build_tiny(texts, fetched_folder(home, monkeypatch))  # SmolLM2's stand-in
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),  # deepsearch's index cache
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # this venv's `rlf`
    )
    for command in commands:
        if words(command) == words(FETCH):
            continue  # SmolLM2's download and conversion: tests/models/test_real_model.py
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"plugins/{plugin}/README.md ({heading}): `{command}` exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )


def test_every_example_config_is_run_by_a_case():
    run = {
        w
        for plugin, heading, _ in CASES.values()
        for c in shell_commands(section((PLUGINS / plugin / "README.md").read_text(), heading))
        for w in words(c)
    }
    configs = sorted(p.relative_to(ROOT).as_posix() for p in PLUGINS.glob("*/examples/*.yaml"))
    assert configs, "found no example configs under plugins/*/examples"
    missing = [c for c in configs if c not in run]
    assert not missing, f"no README section in CASES runs: {', '.join(missing)}"


@pytest.mark.parametrize("config", sorted(PLUGINS.glob("*/examples/*.yaml")), ids=lambda p: p.name)
def test_an_example_configs_comments_print_its_readmes_commands(config):
    """The commands a config's comments print are its README's, word for word: they cannot drift apart."""
    plugin = config.parents[1]
    printed = {tuple(words(c)) for c in shell_commands((plugin / "README.md").read_text())}
    commands = config_commands(config)
    assert commands, f"{config.relative_to(ROOT)} prints no `rlf` command in its comments"
    stray = [c for c in commands if tuple(words(c)) not in printed]
    assert not stray, f"{config.relative_to(ROOT)} prints commands its README does not: {stray}"
