"""The docs cannot rot: every hook, config field and command the code has is documented, as it is.

docs/hooks.md has one level-2 section per hook, headed by the hook's name (a lower-case identifier;
prose headings start with a capital), whose first ``python`` block is the hook's ``def`` line, whose
"Results"/"Async" bullets match the spec and whose examples register as plugins. docs/config.md has a
table row for every config field, by dotted path, with its default and description. Every ``rlf``
command is named somewhere under docs/, and the tutorial's plugin passes ``rlf plugins check``.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import click
import pytest
import yaml
from pydantic import BaseModel

from rlfcore import hookspecs
from rlfcore.cli import cli
from rlfcore.config import RunConfig
from rlfcore.conformance import SYNC_ONLY, check
from rlfcore.plugins import PluginManager
from tests.support.docs import DOCS, code_blocks, config_rows, hook_sections, read_doc

TUTORIAL_PLUGIN = "rlf-calc/rlf_calc/plugin.py"


# --- hooks.md --------------------------------------------------------------------------------------


def expected_def(name: str) -> str:
    """The hook's ``def`` line as hookspecs.py spells it (its annotations are strings, unevaluated)."""
    fn = getattr(hookspecs, name)
    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        assert p.kind is p.POSITIONAL_OR_KEYWORD, f"{name}: teach expected_def about {p.kind} parameters"
        text = p.name if p.annotation is p.empty else f"{p.name}: {p.annotation}"
        params.append(text if p.default is p.empty else f"{text} = {p.default!r}")
    returns = "" if sig.return_annotation is sig.empty else f" -> {sig.return_annotation}"
    return f"def {name}({', '.join(params)}){returns}:"


def normalized(line: str) -> str:
    """Whitespace-insensitive form of a ``def`` line: runs collapsed, none inside brackets' edges."""
    line = " ".join(line.split())
    line = re.sub(r"([(\[])\s+", r"\1", line)
    line = re.sub(r",?\s+([)\]])", r"\1", line)
    return line


def documented_def(name: str, body: str) -> str:
    """The ``def NAME(...)...:`` statement of the section's first python block (it may span lines)."""
    blocks = code_blocks(body, "python")
    assert blocks, f"docs/hooks.md: section '{name}' has no ```python block with its signature"
    match = re.search(
        rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{name}[ \t]*\(.*?\)[^:\n]*:", blocks[0], re.MULTILINE | re.DOTALL
    )
    assert match, f"docs/hooks.md: the first python block of section '{name}' has no `def {name}(...):` line"
    return match.group(0).strip()


def fact(name: str, body: str, label: str) -> str:
    match = re.search(rf"^- \*\*{label}:\*\*[ \t]*(.+)$", body, re.MULTILINE)
    assert match, f"docs/hooks.md: section '{name}' has no '- **{label}:**' line"
    return match.group(1).strip()


@pytest.fixture(scope="module")
def hooks_doc() -> dict[str, str]:
    return hook_sections(read_doc("hooks.md"))


def test_every_hook_has_a_section(hooks_doc):
    missing = [n for n in hookspecs.HOOK_NAMES if n not in hooks_doc]
    assert not missing, f"docs/hooks.md has no section for: {', '.join(missing)}"


def test_no_section_for_a_hook_that_does_not_exist(hooks_doc):
    extra = [n for n in hooks_doc if n not in hookspecs.HOOK_NAMES]
    assert not extra, f"docs/hooks.md documents hooks that hookspecs.py lacks: {', '.join(extra)}"


def test_sections_follow_the_order_of_hookspecs(hooks_doc):
    documented = [n for n in hooks_doc if n in hookspecs.HOOK_NAMES]
    assert documented == [n for n in hookspecs.HOOK_NAMES if n in hooks_doc]


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_documented_signature_is_the_real_one(hooks_doc, name):
    if name not in hooks_doc:
        pytest.skip("no section (reported by test_every_hook_has_a_section)")
    got, want = documented_def(name, hooks_doc[name]), expected_def(name)
    assert normalized(got) == normalized(want), f"docs/hooks.md '{name}':\n  documented: {got}\n  hookspecs:  {want}"


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_documented_calling_convention_matches_the_spec(hooks_doc, name):
    if name not in hooks_doc:
        pytest.skip("no section (reported by test_every_hook_has_a_section)")
    body = hooks_doc[name]
    first = getattr(hookspecs, name).rlf_spec["firstresult"]
    assert fact(name, body, "Results").lower().startswith("first result" if first else "collect-all")
    assert fact(name, body, "Async").lower().startswith("not allowed" if name in SYNC_ONLY else "allowed")


def test_the_checks_themselves_catch_a_wrong_signature():
    wrong = "## compute_score\n\n```python\ndef compute_score(sample: Sample, ctx: ScoreContext) -> float | Score | None:\n```\n"
    got = documented_def("compute_score", hook_sections(wrong)["compute_score"])
    assert normalized(got) != normalized(expected_def("compute_score"))
    spaced = "def compute_score(\n    sample: Sample,\n    verification: Verification | None,\n    ctx: ScoreContext,\n) -> float | list[float] | Score | None:"
    assert normalized(spaced) == normalized(expected_def("compute_score"))


# --- config.md -------------------------------------------------------------------------------------


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The config model a field holds, also when it is optional (``ModelInit | None``)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def config_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, field info)`` of every field of ``model`` and of the models nested in it."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path, info
        sub = nested_model(info.annotation)
        if sub is not None:
            yield from config_fields(sub, f"{path}.")


def default_text(info: Any) -> str:
    """A field's default as the reference table writes it: YAML-ish, ``null`` for None."""
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section)"
    return value if isinstance(value, str) else json.dumps(value)


def test_every_config_field_is_in_the_reference():
    rows = config_rows(read_doc("config.md"))
    missing = [path for path, _ in config_fields(RunConfig) if path not in rows]
    assert not missing, f"docs/config.md has no table row for: {', '.join(missing)}"


def test_config_reference_names_no_field_that_does_not_exist():
    real = {path for path, _ in config_fields(RunConfig)}
    extra = [key for key in config_rows(read_doc("config.md")) if key not in real]
    assert not extra, f"docs/config.md documents fields RunConfig lacks: {', '.join(extra)}"


def test_config_reference_defaults_and_descriptions_match_the_models():
    rows = config_rows(read_doc("config.md"))
    wrong = []
    for path, info in config_fields(RunConfig):
        if path not in rows:
            continue
        _, default, description = rows[path][:3]
        if default.strip("`") != default_text(info):
            wrong.append(f"{path}: default documented as {default}, the model has {default_text(info)}")
        if info.description and info.description.rstrip(".") not in description:
            wrong.append(f"{path}: description lacks the model's {info.description!r}")
    assert not wrong, "docs/config.md is out of date:\n  " + "\n  ".join(wrong)


# --- commands and examples -------------------------------------------------------------------------


def commands(group: click.Command, prefix: str = "rlf") -> Iterator[str]:
    for name, command in getattr(group, "commands", {}).items():
        path = f"{prefix} {name}"
        yield path
        yield from commands(command, path)


def test_every_cli_command_is_documented():
    text = "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")))
    missing = [c for c in commands(cli) if not re.search(rf"{re.escape(c)}(?![\w-])", text)]
    assert list(commands(cli)), "found no rlf commands to check"
    assert not missing, f"no page under docs/ mentions: {', '.join(missing)}"


@pytest.mark.parametrize("page", ["hooks.md", "plugin-tutorial.md", "config.md", "index.md"])
def test_python_and_yaml_examples_parse(page):
    text = read_doc(page)
    for block in code_blocks(text, "python"):
        lone_def = re.fullmatch(r"\s*(async\s+)?def [^\n]*:\s*", block)
        compile(block + ("    ...\n" if lone_def else ""), f"{page} python block", "exec")
    for block in code_blocks(text, "yaml"):
        assert isinstance(yaml.safe_load(block), dict), f"{page}: a yaml block is not a mapping:\n{block}"


def test_the_tutorials_plugin_passes_the_conformance_check(tmp_path):
    """The tutorial's final plugin module, run as a local plugin: it loads, registers and earns its reward."""
    text = read_doc("plugin-tutorial.md")
    blocks = [b for b in code_blocks(text, "python") if b.startswith(f"# {TUTORIAL_PLUGIN}\n")]
    assert blocks, f"docs/plugin-tutorial.md: no python block starting with '# {TUTORIAL_PLUGIN}'"
    path = tmp_path / "calc.py"
    path.write_text(blocks[-1])
    report = check(str(path))
    assert report.ok, report.render()
    assert any(i.name.startswith("smoke rollout") and "reward 1" in i.detail for i in report.items), report.render()


def test_hooks_examples_are_real_plugins():
    """Every example in docs/hooks.md that defines hook implementations registers without a complaint."""
    sections = hook_sections(read_doc("hooks.md"))
    for name, body in sections.items():
        for i, block in enumerate(code_blocks(body, "python")[1:]):
            module = types.ModuleType(f"hooks_md_{name}_{i}")
            exec(compile(block, f"docs/hooks.md {name} example", "exec"), module.__dict__)
            manager = PluginManager()
            manager.register_object("example", module)
            assert name in manager.infos["example"].hooks, f"the example of '{name}' does not implement it"
