"""One run's page and the parts it polls while the run trains: metrics since an offset, the warning
banner, the log's tail, and for an eval run its figures so far."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse

from rlfcore.rundata.files import read_jsonl_from, tail_lines
from rlfcore.rundata.metrics import read_metrics_from, read_metrics_tail
from rlfcore.ui import runs as rd
from rlfcore.ui.context import ui_of
from rlfcore.ui.launch import Launcher
from rlfcore.ui.params import int_param
from rlfcore.ui.samples import SampleFiles, sample_files

LOG_LINES = 60


async def run_page(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run = ui.run_path(request)
    info = await run_in_threadpool(rd.run_info, ui.root, run, ui.samples)
    return ui.page(
        request,
        "run.html",
        run=info,
        config=rd.read_config(run),
        launch=Launcher.record(run),
        files=sample_files(run),
    )


async def metrics(request: Request) -> JSONResponse:
    """Metrics lines from byte ``offset`` on (``file``: metrics.jsonl or sft_metrics.jsonl; a verl run's
    metrics.jsonl is its verl_metrics.jsonl in rlf's names)."""
    run = ui_of(request).run_path(request)
    name = request.query_params.get("file", "metrics.jsonl")
    if name not in ("metrics.jsonl", "sft_metrics.jsonl"):
        raise HTTPException(400, f"file must be metrics.jsonl or sft_metrics.jsonl, not {name!r}")
    offset = int_param(request, "offset", 0)
    rows, end = read_metrics_from(run, offset) if name == "metrics.jsonl" else read_jsonl_from(run / name, offset)
    return JSONResponse({"rows": rows, "offset": end, "status": rd.status(run)})


async def banner(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run = ui.run_path(request)
    found = await run_in_threadpool(_warnings, run, ui.samples)
    return ui.page(request, "_banner.html", warnings=found)


async def eval_figures(request: Request) -> HTMLResponse:
    """An eval run's figures over its output so far, and its status (the page follows both)."""
    ui = ui_of(request)
    run = ui.run_path(request)
    info = await run_in_threadpool(rd.run_info, ui.root, run, ui.samples)
    return ui.page(request, "_eval_summary.html", run=info)


async def log_tail(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    run = ui.run_path(request)
    path = await run_in_threadpool(rd.log_file, run)
    lines = await run_in_threadpool(tail_lines, path, LOG_LINES) if path else []
    return ui.page(request, "_log.html", lines=lines, path=path, status=rd.status(run))


def _warnings(run: Path, files: SampleFiles) -> list[str]:
    """The banner's warnings from the last metrics lines and the newest sample file's entries: a step's
    file holds part of its groups (their whole is ``rollout.n``), an eval's output every group whole."""
    recent = read_metrics_tail(run, 50)
    found = sample_files(run)
    last: list[dict[str, Any]] = []
    group_size: int | None = None
    if found:
        index = files.get(found[-1])
        if found[-1].parent.name == "samples":
            rollout = rd.read_config(run).get("rollout")
            n = rollout.get("n") if isinstance(rollout, dict) else None
            group_size = n if isinstance(n, int) else None
        else:
            group_size = max((len(g) for g in index.groups.values()), default=None)
        last = [
            {
                "row_id": e.row_id,
                "reward": e.reward,
                "truncated": e.truncated,
                "reward_error": "reward error" if e.reward_error else None,
                "template_mismatch": e.mismatch,
            }
            for e in index.entries
        ]
    return rd.warnings(recent, last, group_size)
