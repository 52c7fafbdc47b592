"""``rlf plugins check``: does a plugin keep the contract?

It loads, every hook implementation matches a spec and its signature, its config schema validates
with defaults, what it registers has the right shape, and a smoke rollout with a scripted policy (no
model) runs through its tools and rewards.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from rlfcore.hookcall import call_impl_sync
from rlfcore.hookspecs import RULES
from rlfcore.plugins import PluginError, PluginManager
from rlfcore.types import Example, Tool

SYNC_ONLY = tuple(name for name, rule in RULES.items() if not rule.may_be_async)
"""Hooks the core calls synchronously (``may_be_async=False`` in ``hookspecs``): ``async def`` is an error."""
REWARD_TOLERANCE = 1e-6
"""How far an example's reward may be from its ``expected_reward`` (weighted sums of floats)."""


@dataclass
class CheckItem:
    name: str
    ok: bool
    detail: str = ""
    warning: bool = False


@dataclass
class CheckReport:
    plugin: str
    items: list[CheckItem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.items) and all(i.ok for i in self.items)

    def add(self, name: str, ok: bool, detail: str = "", warning: bool = False) -> bool:
        self.items.append(CheckItem(name, ok, detail, warning))
        return ok

    def render(self) -> str:
        lines = [f"rlf plugins check {self.plugin}"]
        for i in self.items:
            mark = "ok  " if i.ok and not i.warning else ("warn" if i.ok else "FAIL")
            lines.append(f"  [{mark}] {i.name}" + (f": {i.detail}" if i.detail else ""))
        passed = sum(i.ok for i in self.items)
        lines.append(f"{passed} passed, {len(self.items) - passed} failed")
        return "\n".join(lines)


def check(name: str, manager: PluginManager | None = None) -> CheckReport:
    """Check one plugin, by installed name or as a local ``module:attr`` / ``.py`` path."""
    report = CheckReport(name)
    manager = manager or PluginManager()
    if not manager.infos:
        manager.discover()
    if name not in manager.infos and (":" in name or name.endswith(".py")):
        try:
            name = manager.add_local(name)
        except PluginError as exc:
            report.add("found", False, str(exc))
            return report
    if not report.add("found", name in manager.infos, "" if name in manager.infos else _not_found(manager, name)):
        return report
    try:
        manager.enable([name])
    except PluginError as exc:
        report.add("loads", False, str(exc))
        return report
    info = manager.infos[name]
    report.add("loads", True, f"{info.source}" + (f", {info.distribution} {info.version}" if info.distribution else ""))
    if not _check_hooks(report, manager, name):
        return report
    schema_ok = _check_schema(report, manager, name)
    if not schema_ok:
        return report
    _smoke(report, manager, name)
    return report


def _not_found(manager: PluginManager, name: str) -> str:
    import difflib

    installed = sorted(n for n, i in manager.infos.items() if i.source != "builtin")
    close = difflib.get_close_matches(name, installed, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"no plugin named '{name}' is installed (installed: {', '.join(installed) or 'none'}){hint}"


def _check_hooks(report: CheckReport, manager: PluginManager, name: str) -> bool:
    plugin = manager.plugin(name)
    problems = []
    for caller in manager.pm.get_hookcallers(plugin) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin_name != name:
                continue
            if caller.name in SYNC_ONLY and inspect.iscoroutinefunction(impl.function):
                problems.append(f"{caller.name} may not be async")
    hooks = manager.infos[name].hooks
    detail = "; ".join(problems) if problems else (", ".join(hooks) if hooks else "implements no hook")
    return report.add("hooks match their specs", not problems and bool(hooks), detail)


def _check_schema(report: CheckReport, manager: PluginManager, name: str) -> bool:
    impls = [i for i in manager.impls("register_config_schema", [name]) if i.plugin_name == name]
    schema = call_impl_sync(manager, "register_config_schema", impls[0]) if impls else None
    if schema is None:
        return report.add("config schema", True, "none registered (the plugin takes no settings)")
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return report.add("config schema", False, f"register_config_schema returned {schema!r}, not a pydantic model")
    try:
        schema.model_validate({})
    except Exception as exc:
        return report.add("config schema", False, f"{schema.__name__} does not validate with defaults: {exc}")
    return report.add("config schema", True, f"{schema.__name__} validates with defaults")


def _smoke(report: CheckReport, manager: PluginManager, name: str) -> None:
    from rlfcore.config import load_config
    from rlfcore.runtime import Runtime

    try:
        config, _ = load_config({"plugins": [name]}, manager=manager)
        runtime = Runtime.open(config, manager)
    except Exception as exc:
        report.add("registers tools and parsers", False, f"{type(exc).__name__}: {exc}")
        return
    tools = runtime.tools.get(name, {})
    bad = [f"{t.name}: parameters must be a JSON schema of type object" for t in tools.values() if not _is_schema(t)]
    parsers = [p for p, impl in runtime.parsers.items() if not callable(impl)]
    bad += [f"parser {p!r} is not callable" for p in parsers]
    report.add("registers tools and parsers", not bad, "; ".join(bad) or _provides(runtime, name))
    examples = runtime.examples.get(name) or _synthesized(tools)
    try:
        if not examples:
            report.add(
                "smoke rollout", True, "nothing to run: the plugin provides no tools and no examples", warning=True
            )
            return
        runtime.run(_run_examples(report, runtime, name, examples, synthesized=not runtime.examples.get(name)))
    finally:
        runtime.close()


def _provides(runtime: Any, name: str) -> str:
    tools = sorted(runtime.tools.get(name, {}))
    return f"tools: {', '.join(tools) or 'none'}"


def _is_schema(tool: Tool) -> bool:
    return isinstance(tool.parameters, dict) and tool.parameters.get("type") == "object"


def _synthesized(tools: dict[str, Tool]) -> list[Example]:
    """One example per tool, with arguments made up from its schema, when the plugin gives none."""
    examples = []
    for tool in tools.values():
        args = {k: _sample_value(v) for k, v in tool.parameters.get("properties", {}).items()}
        call = json.dumps({"name": tool.name, "arguments": args})
        examples.append(
            Example(
                row={"id": f"smoke-{tool.name}", "prompt": f"Use {tool.name}."},
                script=[f"<tool_call>{call}</tool_call>", "done"],
            )
        )
    return examples


def _sample_value(schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    return {"string": "test", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}.get(
        str(kind), "test"
    )


async def _run_examples(
    report: CheckReport, runtime: Any, name: str, examples: list[Example], synthesized: bool
) -> None:
    from rlfcore.chat import ByteChatTokenizer
    from rlfcore.data import normalize_row
    from rlfcore.engines.scripted import ScriptedEngine
    from rlfcore.loop import Rollout
    from rlfcore.rewards import RewardPipeline

    tokenizer = ByteChatTokenizer()
    rows, script = [], {}
    for i, ex in enumerate(examples):
        row = dict(ex.row)
        row.setdefault("id", f"example-{i}")
        row.setdefault("env", name)
        rows.append(normalize_row(row, i, f"example {i}"))
        script[str(row["id"])] = ex.script
    loop = Rollout(runtime, ScriptedEngine(tokenizer, script), tokenizer)
    trajectories = await loop.run(rows, n=1)
    await RewardPipeline(runtime).score(trajectories)
    for ex, traj in zip(examples, trajectories):
        label = f"smoke rollout {traj.row_id}"
        if traj.stop_reason == "error":
            report.add(label, False, traj.error or "rollout failed")
            continue
        errors = [m["content"] for m in traj.messages if m.get("role") == "tool" and traj.tool_errors]
        detail = f"{traj.num_turns} turns, {traj.tool_calls} tool calls, reward {traj.reward:g}"
        if traj.reward_error:  # before tool errors: a reward hook must cope with a failed call too
            report.add(label, False, f"{detail}; reward failed: {traj.reward_error}")
            continue
        if traj.tool_errors:
            msg = f"{detail}; tool errors: {errors[:2]}"
            report.add(
                label,
                synthesized,
                msg + (" (arguments were made up from the schema)" if synthesized else ""),
                warning=True,
            )
            continue
        if ex.expected_reward is not None and abs(traj.reward - ex.expected_reward) > REWARD_TOLERANCE:
            report.add(label, False, f"{detail}; expected reward {ex.expected_reward:g}")
            continue
        report.add(label, True, detail)
