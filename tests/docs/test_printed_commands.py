"""Every command the top-level README, the examples' READMEs and docs/*.md print is run as printed,
or said why not.

Each command of their bash (sh, shell, console) blocks is in ``PRINTED``, the one table: ``RUN``
(fast: run exactly as printed, in page order, from a fresh clone), ``SLOW`` (the same, marked slow
and run only with ``RLF_DOCS_SLOW=1``: a full training run) or ``not_run(reason)``. A command in no
row fails here, so a new page cannot dodge the table. Every ``rlf`` command, run or not, is also
parsed by the real CLI (its subcommand exists, its options and arguments are accepted), and every
path it names must be in a fresh clone, relative to the folder the page runs it from, unless its row
says who writes it: so a command too slow to run still cannot rot.

Commands run under a home folder of the test's own, with this venv's ``rlf`` first on the path; on a
page that fetches SmolLM2, a tiny model stands in at the fetched folder (as in
tests/docs/test_plugin_readmes.py, which runs the plugins' READMEs).
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest

from rlfcore.cli import cli
from rlfcore.testing import build_tiny
from tests.support import ROOT
from tests.support.docs import FENCE, FETCH, clone_files, fetched_folder, fresh_clone

PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*/README.md"))]
PAGES += sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
SHELLS = {"bash", "sh", "shell", "console"}
EMPTY = "<an empty folder>"
"""A page's commands run in an empty folder of their own (docs/plugin-tutorial.md says so), not the clone."""
CWD = {"docs/plugin-tutorial.md": EMPTY}
"""The folder each page runs its commands from, when not the repository's root."""
SLOW_ENV = "RLF_DOCS_SLOW"


@dataclass(frozen=True)
class Printed:
    """How a printed command is tested; ``written`` names the paths it reads that no clone has, and who writes them."""

    kind: str
    reason: str = ""
    written: dict[str, str] = field(default_factory=dict)

    def writes(self, paths: dict[str, str]) -> Printed:
        """This row, with ``paths`` ({path: who writes it}) allowed to be absent from a clone."""
        return Printed(self.kind, self.reason, {**self.written, **paths})


RUN = Printed("run")
SLOW = Printed("slow")


def not_run(reason: str) -> Printed:
    return Printed("not run", reason)


PLACEHOLDER = "`run.yaml` is the reader's own config, not a file of the repository"
VENV = "makes a virtual environment and installs from the package index: CI's install step"
CI = "runs a test suite: CI runs it"
SERVER = "starts a web server that runs until stopped: tests/ui serve it"
SMOLLM2 = "downloads and converts SmolLM2 (93 MB, minutes): tests/models/test_real_model.py"
INSTALLED_CALC = "needs rlf-calc pip-installed into the environment; tests/test_scaffold_new.py installs and checks it"
RUN_DIR = "`runs/<run>` is a placeholder for the folder the training run above wrote"

PRINTED: dict[str, dict[str, Printed]] = {
    "README.md": {
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[train]' -e plugins/rlf-mcp && .venv/bin/rlf train examples/calculator/run.yaml": not_run(
            VENV
        ).writes({".venv/bin/pip": "python3 -m venv", ".venv/bin/rlf": "pip install"}),
        "python3 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt && .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy && bash plugins/rlf-verifiers/scripts/install-verifiers.sh >/dev/null && bash plugins/rlf-openenv/scripts/install-openenv.sh >/dev/null && RLF_REQUIRE_OPENENV=1 RLF_REQUIRE_VERIFIERS=1 .venv/bin/python -m pytest -q -n 2 --dist loadgroup --ignore=tests/backends/verl/test_verl_e2e.py && bash scripts/setup-verl-cpu.sh >/dev/null && RLF_REQUIRE_VERL_CPU=1 .venv/bin/python -m pytest -q tests/backends/verl/test_verl_e2e.py": not_run(
            "the whole of CI: lint, types and every test suite"
        ).writes(
            {
                ".venv/bin/pip": "python3 -m venv",
                ".venv/bin/ruff": "pip install",
                ".venv/bin/mypy": "pip install",
                ".venv/bin/python": "python3 -m venv",
            }
        ),
        "rlf plugins list": RUN,
        "rlf plugins new myenv": RUN,
        "rlf plugins check myenv": not_run(
            "needs the new plugin pip-installed into the environment; tests/test_scaffold_new.py checks a new plugin"
        ),
        "rlf config run.yaml": not_run(PLACEHOLDER).writes({"run.yaml": "the reader"}),
        "rlf eval run.yaml --limit 20": not_run(PLACEHOLDER).writes({"run.yaml": "the reader"}),
        "rlf train run.yaml": not_run(PLACEHOLDER).writes({"run.yaml": "the reader"}),
        "rlf rescore out.jsonl run.yaml": not_run(PLACEHOLDER).writes(
            {"run.yaml": "the reader", "out.jsonl": "the reader's rlf eval"}
        ),
        "rlf ui runs": not_run(SERVER).writes({"runs": "a training run"}),
    },
    "examples/agent-calculator/README.md": {
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[train,agents]'": not_run(VENV).writes(
            {".venv/bin/pip": "python3 -m venv"}
        ),
        ".venv/bin/rlf train examples/agent-calculator/run.yaml": SLOW.writes(
            {".venv/bin/rlf": "the install above (the test's own venv stands in)"}
        ),
    },
    "examples/calculator/README.md": {
        "rlf train examples/calculator/run.yaml": SLOW,
        "rlf eval examples/calculator/run.yaml model.path=runs/<run>/checkpoints/step_000120/model --limit 100": not_run(
            RUN_DIR
        ).writes({"runs/<run>/checkpoints/step_000120/model": "rlf train"}),
    },
    "examples/smollm2-calculator/README.md": {
        FETCH: not_run(SMOLLM2),
        "rlf train examples/smollm2-calculator/run.yaml --run-dir runs/smollm2": SLOW,
        "rlf models merge runs/smollm2/checkpoints/step_000040 runs/smollm2-merged": SLOW.writes(
            {"runs/smollm2/checkpoints/step_000040": "rlf train", "runs/smollm2-merged": "this merge"}
        ),
        "rlf eval examples/smollm2-calculator/run.yaml model.path=runs/smollm2-merged rollout.n=1 rollout.sampling.temperature=0": SLOW.writes(
            {"runs/smollm2-merged": "rlf models merge"}
        ),
    },
    "docs/agents.md": {
        "rlf train examples/agent-calculator/run.yaml": SLOW,
        "rlf eval examples/agent-calculator/run.yaml model.path=runs/<run>/checkpoints/step_000120/model --limit 100": not_run(
            RUN_DIR
        ).writes({"runs/<run>/checkpoints/step_000120/model": "rlf train"}),
    },
    "docs/config.md": {
        "rlf config run.yaml rollout.n=8 rollout.sampling.temperature=0.7 calc.digits=2 'plugins=[calc]'": not_run(
            PLACEHOLDER + ", enabling the tutorial's calc plugin"
        ).writes({"run.yaml": "the reader"}),
    },
    "docs/evaluation.md": {
        "rlf eval examples/calculator/run.yaml --greedy --limit 50": RUN,
        "rlf eval run.yaml --engine openai engine.base_url=http://localhost:8000/v1 --greedy": not_run(
            "needs an OpenAI-compatible server; tests/engines serve a fake one"
        ).writes({"run.yaml": "the reader"}),
        "rlf eval run.yaml --engine openai-chat engine.base_url=https://api.example.com/v1 engine.model=some-model engine.api_key=$API_KEY --greedy": not_run(
            "needs a hosted API and its key"
        ).writes({"run.yaml": "the reader"}),
        "rlf eval examples/calculator/run.yaml data.eval=examples/calculator/questions.jsonl --repeats 8 --out runs/profile.jsonl": SLOW,
    },
    "docs/models.md": {
        "rlf models list": RUN,
        FETCH: not_run(SMOLLM2),
        "rlf models fetch smollm2-135m-instruct --dtype bfloat16 --dir models/smollm2": not_run(SMOLLM2).writes(
            {"models/smollm2": "this fetch"}
        ),
    },
    "docs/openenv.md": {
        "pip install -e plugins/rlf-openenv": not_run("installs into the environment: CI's install step"),
        "python3 -m venv envs/.venv && envs/.venv/bin/pip install openenv==0.10.0": not_run(VENV).writes(
            {"envs/.venv": "this command", "envs/.venv/bin/pip": "python3 -m venv"}
        ),
        'rlf openenv rows -n 100 --prompt "Say something to the echo environment with the step tool." -o rows.jsonl': RUN,
        "rlf eval run.yaml": not_run(PLACEHOLDER + ", naming an OpenEnv server").writes({"run.yaml": "the reader"}),
        "rlf train run.yaml": not_run(PLACEHOLDER + ", naming an OpenEnv server").writes({"run.yaml": "the reader"}),
        "bash plugins/rlf-openenv/scripts/install-openenv.sh": not_run("installs openenv from the package index"),
        ".venv/bin/python -m pytest -q plugins/rlf-openenv/tests": not_run(CI).writes(
            {".venv/bin/python": "python3 -m venv"}
        ),
    },
    "docs/plugin-tutorial.md": {
        "rlf plugins new calc": RUN,
        "pip install -e 'rlf-calc[test]'": not_run(INSTALLED_CALC).writes({"rlf-calc": "rlf plugins new calc"}),
        "rlf plugins list": RUN,
        "rlf plugins check calc": not_run(INSTALLED_CALC),
        "rlf config run.yaml calc.digits=2 rollout.n=8": not_run(INSTALLED_CALC).writes(
            {"run.yaml": "the reader, from the page's yaml block"}
        ),
        "rlf config bad.yaml": not_run(INSTALLED_CALC).writes({"bad.yaml": "the reader, from the page's yaml block"}),
        "python -m pytest -q rlf-calc": not_run(INSTALLED_CALC).writes({"rlf-calc": "rlf plugins new calc"}),
        "python -c \"from rlfcore.testing import build_tiny; build_tiny(['What is 6 * 7? <answer>42</answer>'], 'tiny-model')\"": RUN,
        "cat > questions.jsonl <<'EOF'\n"
        '{"id": "q1", "prompt": "What is 6 * 7?", "ground_truth": 42}\n'
        '{"id": "q2", "prompt": "What is 1.5 + 2.25?", "ground_truth": 3.75}\n'
        "EOF": RUN,
        "rlf eval eval.yaml engine.device=cpu": not_run(INSTALLED_CALC).writes(
            {"eval.yaml": "the reader, from the page's yaml block"}
        ),
        "python routing.py": not_run("runs the reader's own script, shown in the page's python block").writes(
            {"routing.py": "the reader"}
        ),
        "RLF_PLUGINS=calc rlf plugins list": not_run(INSTALLED_CALC),
        "RLF_DISABLE_PLUGIN_AUTOLOAD=1 rlf plugins list": RUN,
    },
    "docs/training.md": {
        "rlf eval run.yaml data.eval=questions.jsonl --repeats 8 --difficulty runs/questions.difficulty.jsonl": not_run(
            PLACEHOLDER
        ).writes({"run.yaml": "the reader", "questions.jsonl": "the reader"}),
    },
    "docs/ui.md": {
        "pip install -e '.[ui]'": not_run("installs into the environment: CI's install step"),
        "rlf ui runs": not_run(SERVER).writes({"runs": "a training run"}),
        "rlf train examples/calculator/run.yaml": SLOW,
    },
    "docs/verifiers.md": {
        "pip install -e '.[train]' -e 'plugins/rlf-verifiers[verifiers]'": not_run(
            "installs verifiers from the package index: plugins/rlf-verifiers/scripts/install-verifiers.sh"
        ),
        "pip install my-taskset": not_run("`my-taskset` is a placeholder for the reader's environment"),
        "rlf verifiers prepare my-taskset --args '{\"num_tasks\": 100}' -o rows.jsonl": not_run(
            "`my-taskset` is a placeholder for an installed verifiers environment"
        ),
        "rlf eval run.yaml": not_run(PLACEHOLDER).writes({"run.yaml": "the reader"}),
        "rlf train run.yaml": not_run(PLACEHOLDER).writes({"run.yaml": "the reader"}),
        "rlf verifiers export examples/calculator/run.yaml -o rlf-calculator": RUN,
        "pip install ./rlf-calculator": not_run("installs into the environment, beside verifiers").writes(
            {"./rlf-calculator": "rlf verifiers export"}
        ),
        "vf-eval rlf-calculator -m MODEL --client.base-url http://127.0.0.1:8000/v1 --env.agent.runtime.type subprocess --no-push": not_run(
            "`MODEL` is a placeholder, served at the URL by the reader; needs verifiers installed"
        ),
        "bash plugins/rlf-verifiers/scripts/install-verifiers.sh": not_run("installs verifiers from the package index"),
        ".venv/bin/python -m pytest -q plugins/rlf-verifiers/tests": not_run(CI).writes(
            {".venv/bin/python": "python3 -m venv"}
        ),
    },
}
"""Page: {command as printed (continuation lines joined, a trailing comment dropped): how it is tested}."""

TIMEOUT_S = {"run": 120, "slow": 1800}


def commands(text: str) -> list[str]:
    """The commands of ``text``'s shell blocks, in order: continuation lines joined, a heredoc kept whole,
    comment lines and trailing comments dropped, a console block's ``$`` prompt too (its output is not a command)."""
    out: list[str] = []
    for kind, body in FENCE.findall(text):
        if kind not in SHELLS:
            continue
        lines = iter(re.sub(r"[ \t]*\\\n[ \t]*", " ", body).splitlines())
        for raw in lines:
            line = raw.strip()
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line or line.startswith("#"):
                continue
            line = re.split(r"\s+#\s", line, maxsplit=1)[0].rstrip()
            heredoc = re.search(r"<<-?\s*'?\"?(\w+)", line)
            if heredoc:
                body_lines = []
                for more in lines:
                    body_lines.append(more)
                    if more.strip() == heredoc.group(1):
                        break
                line = "\n".join([line, *body_lines])
            out.append(line)
    return out


def printed() -> list[tuple[str, str]]:
    return [(page, command) for page in PAGES for command in commands((ROOT / page).read_text())]


def row(page: str, command: str) -> Printed:
    found = PRINTED.get(page, {}).get(command)
    assert found is not None, (
        f"{page} prints `{command}`, which PRINTED in {Path(__file__).relative_to(ROOT)} does not classify: "
        "add it as RUN (fast), SLOW (marked slow) or not_run(reason)"
    )
    return found


def test_every_printed_command_is_classified_with_a_reason_when_not_run():
    found = printed()
    assert any(page == "README.md" for page, _ in found), "found no command in README.md's bash blocks"
    unclassified = [f"{page}: {command}" for page, command in found if command not in PRINTED.get(page, {})]
    assert not unclassified, "printed commands in none of RUN, SLOW, NOT_RUN:\n" + "\n".join(unclassified)
    unexplained = [
        f"{p}: {c}"
        for p, rows in PRINTED.items()
        for c, r in rows.items()
        if r.kind == "not run" and not r.reason.strip()
    ]
    assert not unexplained, "NOT_RUN rows with no reason:\n" + "\n".join(unexplained)
    kinds = {r.kind for rows in PRINTED.values() for r in rows.values()}
    assert kinds <= {"run", "slow", "not run"}, f"unknown kinds in PRINTED: {kinds}"
    stale = [f"{p}: {c}" for p, rows in PRINTED.items() for c in rows if (p, c) not in found]
    assert not stale, "PRINTED classifies commands no page prints any more:\n" + "\n".join(stale)


def is_path(word: str) -> bool:
    """Whether a word reads as a file or folder of the repository (not an URL, an option or a name)."""
    return (
        "://" not in word
        and not word.startswith("-")
        and ("/" in word or re.search(r"\.(ya?ml|jsonl?|py|sh|txt)$", word) is not None)
    )


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of a shell line (split at ``&&``, ``||``, ``;``, ``|``), from the
    program on: redirections and leading ``VAR=value`` assignments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    parts: list[list[str]] = [[]]
    target = False
    for token in lexer:
        if target:
            target = False
        elif not parts[-1] and re.match(r"^[A-Z_]+=", token):
            pass  # `VAR=value` before the program
        elif token in {"&&", "||", ";", "|"}:
            parts.append([])
        elif re.match(r"^[0-9&]?>>?", token):
            target = re.fullmatch(r"[0-9&]?>>?", token) is not None  # `> out`: its target is the next word
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def parse_rlf(args: list[str], written: dict[str, str]) -> list[str]:
    """Parse ``rlf ARGS`` with the real CLI, invoking nothing; the path-like arguments it takes, to check."""
    original = click.Path.convert

    def lenient(self: click.Path, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if str(value) in written:  # written before this command runs: its existence is the runner's check
            self = copy.copy(self)
            self.exists = False
        return original(self, value, param, ctx)

    paths: list[str] = []
    command: click.Command = cli
    parent: click.Context | None = None
    name = "rlf"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(click.Path, "convert", lenient)
        while True:
            ctx = command.make_context(name, list(args), parent=parent, resilient_parsing=False)
            if not isinstance(command, click.Group):
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # click 9 moves them into ctx.args
                rest = [*ctx.protected_args, *ctx.args]
            found, sub, args = command.resolve_command(ctx, rest)
            assert sub is not None and found is not None, f"`rlf` has no command {rest[:1]}"
            command, parent, name = sub, ctx, found
    for param in command.params:
        value = ctx.params.get(param.name or "")
        values = [str(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]
        if isinstance(param, click.Argument) or (isinstance(param.type, click.Path) and param.type.exists):
            # KEY=VALUE overrides: a path typed on the command line is read from the shell's folder
            paths += [v.split("=", 1)[-1] for v in values if is_path(v.split("=", 1)[-1])]
    return paths


@pytest.mark.parametrize(("page", "command"), printed(), ids=[f"{p}: {c.splitlines()[0]}" for p, c in printed()])
def test_a_printed_command_parses_and_names_paths_a_clone_has(page, command, tmp_path, monkeypatch):
    entry = row(page, command)
    cwd = CWD.get(page, ".")
    if cwd == EMPTY:
        have: set[str] = set()
        monkeypatch.chdir(tmp_path)
    else:
        files = clone_files()
        have = {n for f in files for n in [f, *(p.as_posix() for p in Path(f).parents)]}
        monkeypatch.chdir(ROOT / cwd)
    checked: list[str] = []
    for argv in simple_commands(command.split("\n")[0]):
        program, rest = argv[0], argv[1:]
        if Path(program).name == "rlf":
            try:
                checked += parse_rlf(rest, entry.written)
            except click.ClickException as exc:
                pytest.fail(f"{page}: `{command}` does not parse: {exc.format_message()}")
        else:
            code = {i + 1 for i, w in enumerate(rest) if w == "-c"}  # `python -c CODE`: code, not a path
            checked += [w for i, w in enumerate(rest) if i not in code and is_path(w) and "=" not in w]
        if "/" in program:
            checked.append(program)
    missing = [
        p
        for p in checked
        if p not in entry.written and re.sub(r"\[.*\]$", "", p).rstrip("/").removeprefix("./") not in have
    ]
    where = "an empty folder" if cwd == EMPTY else f"a clone's {cwd!r}"
    assert not missing, f"{page}: `{command}` names {missing}, not in {where} (a row's `written` says who writes one)"


def run_page(page: str, kinds: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``page``'s commands of ``kinds`` in order and exactly as printed, from a fresh clone."""
    todo = [c for c in commands((ROOT / page).read_text()) if row(page, c).kind in kinds]
    clone = fresh_clone(tmp_path / "work" / "rlf")
    cwd = clone / CWD.get(page, ".") if CWD.get(page) != EMPTY else tmp_path / "empty"
    cwd.mkdir(exist_ok=True)
    if any(".venv/" in c for c in todo):
        (clone / ".venv").symlink_to(Path(sys.prefix))  # what the page's install step makes: this venv
    home = tmp_path / "home"
    if FETCH in PRINTED.get(page, {}):  # SmolLM2's stand-in, where the fetch would put it
        build_tiny(["What is 6 * 7? <tool_call>", "<answer>42</answer>"], fetched_folder(home, monkeypatch))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # this venv's `rlf`
    )
    for command in todo:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S[row(page, command).kind],
        )
        assert done.returncode == 0, (
            f"{page}: `{command}` exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
        print(f"{time.monotonic() - started:6.1f} s  {page}: {command.splitlines()[0]}")


def pages_with(kind: str) -> list[str]:
    return [page for page in PAGES if any(r.kind == kind for r in PRINTED.get(page, {}).values())]


@pytest.mark.parametrize("page", pages_with("run"))
def test_a_pages_fast_commands_run_as_printed_from_a_fresh_clone(page, tmp_path, monkeypatch):
    run_page(page, {"run"}, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(SLOW_ENV) != "1", reason=f"a full training run: set {SLOW_ENV}=1")
@pytest.mark.parametrize("page", pages_with("slow"))
def test_a_pages_slow_commands_run_as_printed_from_a_fresh_clone(page, tmp_path, monkeypatch):
    run_page(page, {"run", "slow"}, tmp_path, monkeypatch)
