"""``rlf verifiers export``: an rlf run config (its plugins, its rows) written as an installable verifiers 0.4
environment package, which ``vf-eval`` runs by its name. What the package's classes do is
:mod:`rlf_verifiers.taskset`; this module only writes the package (it needs no verifiers)."""

from __future__ import annotations

import json
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from rlfcore import Message, config_path, load_config, read_rows

Split = Literal["eval", "train"]

CONFIG_FILE = "rlf.yaml"
"""The run config a package carries (``RunConfig.save``: its relative paths read as in the original)."""
TASKS_FILE = "tasks.jsonl"
"""The package's tasks: one ``RlfData`` (id, prompt messages, the row as read) per line."""

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

MODULE = '''\
"""{name}: rlf run config {source} as a verifiers 0.4 environment (written by `rlf verifiers export`).

    vf-eval {name} -m MODEL --client.base-url URL --env.agent.runtime.type subprocess --no-push
"""

from typing import Any

from rlf_verifiers.taskset import RlfHarness, RlfTaskset
from rlf_verifiers.taskset import load_environment as _load


class Taskset(RlfTaskset):
    """The rows of {source}, scored by its reward; the tools of its plugins."""


def load_environment(**args: Any) -> Any:
    """This environment, as `vf-eval {name}` builds it, its agent on this host; args: the taskset's config."""
    return _load(__name__, args)


__all__ = ["RlfHarness", "Taskset", "load_environment"]
'''

PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
description = "rlf run config {source} as a verifiers environment (rlf verifiers export)"
requires-python = ">=3.11"
dependencies = {dependencies}

[tool.setuptools]
packages = ["{module}"]

[tool.setuptools.package-data]
{module} = ["{config}", "{tasks}"]
"""


class ExportError(Exception):
    """The config or its rows cannot be exported; the message says which and why."""


def export(
    config: Path,
    out: Path,
    name: str | None = None,
    split: Split = "eval",
    limit: int | None = None,
    overrides: list[str] | None = None,
) -> list[str]:
    """Write the package for ``config`` (with ``overrides``) into ``out``: its ``split`` rows (at most ``limit``)
    as the tasks, the resolved config, and a module exporting the taskset. Returns the task ids."""
    name = name or out.resolve().name
    if not NAME.fullmatch(name):
        raise ExportError(f"{name!r} is not a package name (letters, digits, '-' and '_', a letter first): pass --name")
    module = name.replace("-", "_").lower()
    cfg, _ = load_config(config, overrides)
    data = cfg.data.eval if split == "eval" else cfg.data.train
    if data is None:
        raise ExportError(f"{config}: data.{split} is not set: name the rows to export")
    rows = read_rows(config_path(cfg, data), limit)
    prompt_system = cfg.rollout.system_prompt
    tasks = []
    for row in rows:
        prompt: list[Message] = list(row.prompt)
        if prompt_system and not (prompt and prompt[0].get("role") == "system"):
            prompt.insert(0, {"role": "system", "content": prompt_system})  # as rlf's loop prepends it
        tasks.append({"id": row.id, "prompt": prompt, "row": row.raw})
    package = out / module
    package.mkdir(parents=True, exist_ok=True)
    cfg.save(package / CONFIG_FILE)
    with (package / TASKS_FILE).open("w", encoding="utf-8") as f:
        for task in tasks:
            f.write(json.dumps(task, ensure_ascii=False) + "\n")
    source = Path(config).name
    (package / "__init__.py").write_text(MODULE.format(name=name, source=source))
    (out / "pyproject.toml").write_text(
        PYPROJECT.format(
            name=name,
            module=module,
            source=source,
            config=CONFIG_FILE,
            tasks=TASKS_FILE,
            dependencies=json.dumps(["rlf-verifiers", *distributions(cfg.plugins)]),
        )
    )
    return [str(task["id"]) for task in tasks]


def distributions(plugins: list[str]) -> list[str]:
    """The installed distributions of the enabled plugins (their ``rlf`` entry points), for the package's
    dependencies."""
    found: dict[str, Any] = {ep.name: ep.dist for ep in entry_points(group="rlf")}
    return sorted({found[p].name for p in plugins if found.get(p) is not None and found[p].name != "rlf-verifiers"})
