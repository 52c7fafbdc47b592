"""``rlf plugins new``: a complete plugin distribution that installs and passes its checks unchanged."""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")

PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "rlf-{name}"
version = "0.1.0"
description = "rlf plugin {name}: a greeting tool and a reward"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["rlfcore"]

[project.optional-dependencies]
test = ["pytest>=8"]

[project.entry-points.rlf]
{name} = "{package}.plugin"

[tool.setuptools.packages.find]
include = ["{package}*"]
"""

PLUGIN = '''\
"""rlf plugin {name}: one tool the model can call and the reward for its answers.

Enable it in a run config with ``plugins: [{name}]``; its settings live under ``{name}:``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from rlfcore import Example, Sample, Score, SetupContext, Tool, hookimpl, tool


class Settings(BaseModel):
    """The ``{name}:`` section of a run config."""

    model_config = ConfigDict(extra="forbid")

    greeting: str = "Hello"


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return Settings


@hookimpl
def register_tools(ctx: SetupContext) -> list[Tool]:
    settings = ctx.settings_as(Settings)

    @tool
    def greet(name: str) -> str:
        """Greet someone by name."""
        return f"{{settings.greeting}}, {{name}}!"

    return [greet]


@hookimpl
def compute_score(sample: Sample) -> Score | None:
    """1 when the final answer is the expected greeting, else 0."""
    if sample.ground_truth is None:
        return None
    value = float(sample.response.strip() == str(sample.ground_truth).strip())
    return Score(value=value, components={{"greeting": value}})


@hookimpl
def register_examples(ctx: SetupContext) -> list[Example]:
    call = '<tool_call>{{"name": "greet", "arguments": {{"name": "Ada"}}}}</tool_call>'
    return [
        Example(
            row={{"id": "greet-ada", "prompt": "Greet Ada.", "ground_truth": "Hello, Ada!"}},
            script=[call, "Hello, Ada!"],
            expected_reward=1.0,
        )
    ]
'''

TEST = '''\
"""Tests of the {name} plugin, with rlfcore's testing helpers."""

from rlfcore.testing import check_plugin, rollout


def test_plugin_conforms():
    report = check_plugin("{name}")
    assert report.ok, report.render()


def test_greeting_earns_the_reward():
    config = {{"plugins": ["{name}"]}}
    script = ['<tool_call>{{"name": "greet", "arguments": {{"name": "Bob"}}}}</tool_call>', "Hello, Bob!"]
    [result] = rollout(config, [{{"id": "b", "prompt": "Greet Bob.", "ground_truth": "Hello, Bob!"}}], {{"b": script}})
    assert result.messages[2]["content"] == "Hello, Bob!"  # the tool's answer, seen by the model
    assert result.reward == 1.0
'''

README = """\
# rlf-{name}

An [rlf](https://pypi.org/project/rlfcore/) plugin: a `greet` tool and a reward for greeting by name.

```bash
pip install -e '.[test]'  # the plugin, and pytest for its tests
rlf plugins list          # shows {name}
rlf plugins check {name}
pytest
```

Enable it in a run config:

```yaml
plugins: [{name}]
{name}:
  greeting: Hello
```
"""


def write_plugin(name: str, directory: Path | None = None) -> Path:
    """Write the distribution ``rlf-NAME`` (package ``rlf_NAME``) and return its folder."""
    if not _NAME.match(name):
        raise ValueError(f"plugin name {name!r}: use lower-case letters, digits and single '-' or '_' (like 'nl2sql')")
    package = "rlf_" + name.replace("-", "_")
    target = directory or Path(f"rlf-{name}")
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} exists and is not empty; choose another --dir")
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{package}/__init__.py": '"""rlf plugin {name}."""\n',
        f"{package}/plugin.py": PLUGIN,
        "tests/test_plugin.py": TEST,
    }
    for rel, text in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(name=name, package=package))
    return target
