"""The runs list (and the table it refreshes) and the page that compares chosen runs."""

from __future__ import annotations

import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse

from rlfcore.ui import runs as rd
from rlfcore.ui.context import ui_of


async def index(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    found = await run_in_threadpool(rd.find_runs, ui.root, ui.samples)
    return ui.page(request, "runs.html", runs=found, now=time.time())


async def runs_table(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    found = await run_in_threadpool(rd.find_runs, ui.root, ui.samples)
    return ui.page(request, "_runs_table.html", runs=found, now=time.time())


async def compare(request: Request) -> HTMLResponse:
    """The page only names the runs (each must exist); their curves come from ``/api/metrics``."""
    ui = ui_of(request)
    names = request.query_params.getlist("run")
    for n in names:
        ui.run_named(n)
    return ui.page(request, "compare.html", names=names)
