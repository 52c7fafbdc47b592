"""The tools page: a config's tools with their schemas (and, opened from a run, each tool's calls,
errors and latency in it), and one call through the executor a rollout uses."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse

from rlfcore.ui import runs as rd
from rlfcore.ui.configs import explain
from rlfcore.ui.context import ui_of
from rlfcore.ui.samples import SampleFiles, sample_files
from rlfcore.ui.toolbench import tool_stats


async def tools_page(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run = ui.run_path(request) if request.query_params.get("run") else None
    cfg = ui.config_path(request, run)
    error, found, stats = None, {}, {}
    if cfg is None:
        error = "no config: open this page from a run, or give ?config=PATH (or start rlf ui with --config)"
    elif ui.read_only:  # listing tools sets plugins up: imports, servers, commands
        error = (
            "read-only: this UI sets up no plugins (no imports, no servers), so it lists no tools; "
            f"from a shell: rlf plugins list --config {cfg}"
        )
    else:
        try:
            found = await run_in_threadpool(ui.bench.tools, cfg)
        except Exception as exc:  # a config or plugin error is shown, not raised
            error = explain(exc)
    if run is not None:
        stats = await run_in_threadpool(_run_tool_stats, run, ui.samples)
    return ui.page(
        request,
        "tools.html",
        config=cfg,
        tools=found,
        error=error,
        stats=stats,
        run=rd.run_info(ui.root, run, ui.samples) if run else None,
    )


async def tool_call(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    form = await request.form()
    cfg = ui.allowed_config(str(form.get("config", "")))
    started = time.perf_counter()
    try:
        result = await run_in_threadpool(
            ui.bench.call,
            cfg,
            str(form.get("plugin", "")),
            str(form.get("name", "")),
            str(form.get("arguments", "")),
        )
        error = None
    except Exception as exc:
        result, error = None, explain(exc)
    return ui.page(request, "_tool_result.html", result=result, error=error, wall_s=time.perf_counter() - started)


def _run_tool_stats(run: Path, files: SampleFiles, max_records: int = 400) -> dict[str, Any]:
    """Per-tool calls, errors and latency over the last sample file, and error kinds over all of it."""
    found = sample_files(run)
    if not found:
        return {}
    index = files.get(found[-1])
    picked = list(range(max(0, len(index.entries) - max_records), len(index.entries)))
    records = [index.read(i) for i in picked]
    kinds: dict[str, int] = {}
    for r in records:
        for k, v in (r.get("tool_error_kinds") or {}).items():
            kinds[k] = kinds.get(k, 0) + (v if isinstance(v, int) else 0)
    return {"file": found[-1].name, "samples": len(records), "tools": tool_stats(records), "kinds": kinds}
