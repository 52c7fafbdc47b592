"""The tools page: a config's plugins and tools, and single calls through the run's real executor.

A bench holds one :class:`~rlfcore.runtime.Runtime` per config (plugins may start servers, e.g. the
MCP calculator), on one event loop thread of its own, so calls from request handlers never block on
or tear down each other's servers. :meth:`ToolBench.close` shuts every runtime down.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlfcore.types import ToolCall


class ToolBench:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlf-ui-tools", daemon=True)
        self._thread.start()
        self._runtimes: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _run(self, coro: Any, timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def runtime(self, config_path: Path) -> Any:
        """The runtime of ``config_path``, created on first use; config errors raise ConfigError."""
        key = str(config_path.resolve())
        with self._lock:
            if key not in self._runtimes:
                from rlfcore.config import load_config
                from rlfcore.runtime import Runtime

                config, manager = load_config(config_path)
                self._runtimes[key] = self._run(Runtime.create(config, manager))
            return self._runtimes[key]

    def tools(self, config_path: Path) -> dict[str, list[dict[str, Any]]]:
        """Per enabled plugin, its tools' schemas."""
        runtime = self.runtime(config_path)
        return {
            plugin: [t.schema()["function"] | {"timeout_s": t.timeout_s} for t in tools.values()]
            for plugin, tools in sorted(runtime.tools.items())
        }

    def call(self, config_path: Path, plugin: str, name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
        """One call, returned exactly as the executor's ToolResult; unreadable JSON is a malformed call."""
        runtime = self.runtime(config_path)
        tools = runtime.tools.get(plugin, {})
        error = None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                arguments, error = {}, f"the arguments are not JSON: {exc}"
        if not isinstance(arguments, dict):
            arguments, error = {}, f"the arguments must be a JSON object, got {type(arguments).__name__}"
        call = ToolCall(name=name, arguments=arguments, id="ui", error=error)
        result = self._run(runtime.executor.run_one(call, tools))
        return asdict(result)

    def close(self) -> None:
        with self._lock:
            for runtime in self._runtimes.values():
                try:
                    self._run(runtime.aclose(), timeout=30)
                except Exception:  # one plugin's failed shutdown must not keep the others alive
                    pass
            self._runtimes.clear()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


def tool_stats(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per tool in a run's samples: calls and errors (tool messages saying ``Error:``), latency when recorded."""
    stats: dict[str, dict[str, Any]] = {}
    for rec in samples:
        for m in rec.get("messages") or []:
            if not isinstance(m, dict) or m.get("role") != "tool":
                continue
            s = stats.setdefault(str(m.get("name", "?")), {"calls": 0, "errors": 0, "latencies": []})
            s["calls"] += 1
            s["errors"] += bool(m.get("error")) or str(m.get("content", "")).startswith("Error")
            if isinstance(m.get("latency_s"), (int, float)):
                s["latencies"].append(m["latency_s"])
    for s in stats.values():
        lat = sorted(s.pop("latencies"))
        s["p50_s"] = lat[len(lat) // 2] if lat else None
        s["error_rate"] = s["errors"] / s["calls"] if s["calls"] else 0.0
    return stats
