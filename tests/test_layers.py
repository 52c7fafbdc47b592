"""The import graph of ``rlfcore`` as the architecture states it: layers that import downward only.

``LAYERS`` is that statement (docs/architecture.md draws it): each module prefix and its layer. A
module may import, at run time, only from its own layer or lower ones, and no run-time imports may
form a cycle. Run-time means everything but the imports under ``if TYPE_CHECKING:``; an import inside
a function counts too: it is lazy, but it runs the moment its function is called, and an upward one
ties the lower layer to the upper all the same (it only hides the tie from an import-time error).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "rlfcore"

LAYERS: dict[str, int] = {
    # 0. Plain types and helpers that know nothing of plugins: the config schema, paths, run-folder files.
    "rlfcore.types": 0,
    "rlfcore.stash": 0,
    "rlfcore.paths": 0,
    "rlfcore.schema": 0,
    "rlfcore.schemas": 0,
    "rlfcore.surrogates": 0,
    "rlfcore.registries": 0,
    "rlfcore.hooktrace": 0,
    "rlfcore.threads": 0,
    "rlfcore.cpus": 0,
    "rlfcore.signals": 0,
    "rlfcore.processes": 0,
    "rlfcore.runloop": 0,
    "rlfcore.trackers": 0,
    "rlfcore.scaffold": 0,
    "rlfcore.rundata": 0,
    # 1. The contract with plugins: contexts, hook specs, the `tool` helper, and the package's face.
    "rlfcore": 1,
    "rlfcore.context": 1,
    "rlfcore.hookspecs": 1,
    "rlfcore.tools": 1,
    # 2. Text and models: chat templates, tokens, datasets, tiny and real model files.
    "rlfcore.chat": 2,
    "rlfcore.data": 2,
    "rlfcore.sequences": 2,
    "rlfcore.tinymodel": 2,
    "rlfcore.models": 2,
    "rlfcore.realmodels": 2,
    # 3. Plugin machinery: finding and loading plugins, calling their hooks (the one schema lookup).
    "rlfcore.plugins": 3,
    "rlfcore.hookcall": 3,
    # 4. Services: config loading (YAML, overrides, plugins), listing, tool execution, deadlines, engines.
    "rlfcore.config": 4,
    "rlfcore.catalog": 4,
    "rlfcore.executor": 4,
    "rlfcore.deadlines": 4,
    "rlfcore.engines": 4,
    # 5. A run's shared state: the runtime, per-trajectory sessions, the built-in plugins.
    "rlfcore.runtime": 5,
    "rlfcore.sessions": 5,
    "rlfcore.builtins": 5,
    # 6. The loop: multi-turn rollouts (rlf's own, and agent programs' through the endpoint) and what
    #    reads them (rewards, failures, warnings).
    "rlfcore.loop": 6,
    "rlfcore.chatloop": 6,
    "rlfcore.agents": 6,
    "rlfcore.rewards": 6,
    "rlfcore.failures": 6,
    "rlfcore.diagnostics": 6,
    # 7. Whole jobs over the loop: evaluation, rescoring, plugin conformance.
    "rlfcore.evaluation": 7,
    "rlfcore.rescoring": 7,
    "rlfcore.conformance": 7,
    "rlfcore.testing": 7,
    # 8-10. Backends, the UI, the command line.
    "rlfcore.backends": 8,
    "rlfcore.ui": 9,
    "rlfcore.cli": 10,
    "rlfcore.__main__": 10,
}

OPTIONAL = {
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "matplotlib",
    "peft",
    "httpx",
    "starlette",
    "uvicorn",
    "multipart",
    "verl",
    "ray",
    "omegaconf",
    "hydra",
    "qwen_agent",
    "tensorboard",
    "wandb",
    "mlflow",
    "trackio",
    "gguf",
}
"""Top-level packages of rlfcore's optional extras (and verl's own): a module that needs a missing one is skipped."""


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def runtime_imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``name`` imports at run time (module level or in a function; not under TYPE_CHECKING).

    ``from a import b`` is an import of ``a.b`` where that is a module, else of ``a``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for imported in targets:
            target = imported
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(known: dict[str, Path]) -> dict[str, set[str]]:
    return {name: runtime_imports(name, path, known) for name, path in known.items()}


def layer_of(module: str) -> int | None:
    """The layer of the longest prefix in ``LAYERS`` (the bare package name matches only itself)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS and (n > 1 or module == prefix):
            return LAYERS[prefix]
    return None


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Each run-time import of a module from a higher layer, as ``a (layer) -> b (layer)``."""
    out = []
    for a, targets in sorted(edges.items()):
        for b in sorted(targets):
            la, lb = layer_of(a), layer_of(b)
            if la is not None and lb is not None and lb > la:
                out.append(f"{a} (layer {la}) -> {b} (layer {lb})")
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, f"modules with no layer in LAYERS (place each where it belongs): {unplaced}"


def test_the_architecture_page_names_every_layer():
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [p for p in LAYERS if p.removeprefix("rlfcore.") not in page]
    assert not missing, f"docs/architecture.md does not place: {missing}"


def test_no_run_time_import_cycle():
    found = cycles(graph(MODULES))
    assert not found, "run-time import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_imports_from_a_higher_layer():
    found = upward(graph(MODULES))
    assert not found, "run-time imports from a higher layer:\n  " + "\n  ".join(found)


def test_the_checks_catch_a_back_import(tmp_path):
    """The checks read the code: one function-local import from plugins up to the config loader (the
    cycle this layering removed) is both a cycle and an import from a higher layer."""
    copy = dict(MODULES)
    patched = tmp_path / "plugins.py"
    patched.write_text(
        MODULES["rlfcore.plugins"].read_text() + "\n\ndef _late():\n    from rlfcore.config import load_config\n"
    )
    copy["rlfcore.plugins"] = patched
    edges = graph(copy)
    assert ["rlfcore.config", "rlfcore.plugins"] in cycles(edges)
    assert "rlfcore.plugins (layer 3) -> rlfcore.config (layer 4)" in upward(edges)
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlfcore.config import RunConfig\n"
    )
    assert runtime_imports("rlfcore.plugins", guarded, MODULES) == set()


SCRIPTS = {"rlfcore.__main__"}
"""Modules that run a program when imported: ``python -m rlfcore`` is the CLI itself."""

PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "starlette.applications")
"""Third-party packages imported once, before the forks: seconds each, and no part of rlfcore's graph."""

_FORKS = """
import importlib, json, os, sys, tempfile, traceback
names, optional, preload = (arg.split(",") for arg in sys.argv[1:4])
for package in preload:
    try:
        importlib.import_module(package)
    except ImportError:
        pass
early = sorted(m for m in sys.modules if m.split(".")[0] == "rlfcore")
assert not early, f"preloading imported rlfcore modules: {early}"
results, running = {}, {}


def reap():
    pid, status = os.wait()
    name, log = running.pop(pid)
    results[name] = [os.waitstatus_to_exitcode(status), open(log).read()]
    os.unlink(log)


for name in names:
    while len(running) >= max(2, os.cpu_count() or 2):
        reap()
    fd, log = tempfile.mkstemp(suffix=".log")
    pid = os.fork()
    if pid == 0:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] in optional:
                print(exc.name, flush=True)
                os._exit(3)
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    os.close(fd)
    running[pid] = (name, log)
while running:
    reap()
print(json.dumps(results))
"""
"""One fresh interpreter imports the heavy third-party packages, then forks a child per module: each
child meets rlfcore for the first time (no rlfcore module is loaded before the fork), so each module
is imported alone, at the cost of a fork rather than of a new interpreter importing torch again."""


@pytest.fixture(scope="module")
def imported_alone() -> dict[str, list]:
    """Each module's exit code (0 imported, 3 an optional dependency missing, else failed) and output."""
    names = sorted(set(MODULES) - SCRIPTS)
    cmd = [sys.executable, "-c", _FORKS, ",".join(names), ",".join(sorted(OPTIONAL)), ",".join(PRELOAD)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(set(MODULES) - SCRIPTS))
def test_each_module_imports_alone(name, imported_alone):
    code, output = imported_alone[name]
    if code == 3:
        pytest.skip(f"{name} needs {output.strip()}, an optional dependency not installed here")
    assert code == 0, f"import {name} alone (after nothing of rlfcore) failed:\n{output[-3000:]}"
