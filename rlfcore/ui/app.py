"""The ``rlf ui`` web app: the shared context, the routes to the views, the middleware that guards them.

The pages live in :mod:`rlfcore.ui.views`, one module per page family, each handler a plain
``async def view(request)`` reading the :class:`~rlfcore.ui.context.UI` this module builds (as
``app.state.ui``). Every request passes the ``Host`` check, then the token, Origin and CSRF checks of
:mod:`rlfcore.ui.access`; read-only mode leaves out the routes that start a process or call a tool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from rlfcore.ui.access import Access, Secret, new_token
from rlfcore.ui.allowed import Roots
from rlfcore.ui.context import UI, ui_of
from rlfcore.ui.views import data, run, runs, tools, trajectories

STATIC = Path(__file__).parent / "static"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")  # as Starlette reads a Host header: IPv6 in brackets


def create_app(
    root: str | Path,
    config: str | Path | None = None,
    poll_ms: int = 2000,
    *,
    token: str | None = None,
    hosts: list[str] | None = None,
    roots: list[str | Path] | None = None,
    read_only: bool = False,
) -> Starlette:
    """The app over the runs under ``root``; ``config`` is the default config of the tools and data pages.

    ``token`` is the secret every request needs (a new one when not given: read it from
    ``app.state.ui.secret``); ``hosts`` the ``Host`` names accepted besides loopback's; ``roots`` more
    folders whose configs may be read and launched; ``read_only`` leaves out launching, stopping,
    resuming and tool calls.
    """
    root_path = Path(root).resolve()
    config_file = Path(config).resolve() if config else None
    folders = [root_path, *(Path(r) for r in roots or [])] + ([config_file.parent] if config_file else [])
    ui = UI(root_path, config_file, poll_ms, Roots(folders), Secret(token or new_token()), read_only)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        ui.close()

    middleware = [
        Middleware(
            TrustedHostMiddleware,
            allowed_hosts=[*LOCAL_HOSTS, *(f"[{h}]" if ":" in h else h for h in hosts or [])],
            www_redirect=False,
        ),
        Middleware(Access, secret=ui.secret),
    ]
    app = Starlette(
        routes=_routes(read_only),
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: not_found, Exception: failed},
    )
    app.state.ui = ui
    return app


def _routes(read_only: bool) -> list[BaseRoute]:
    """Every page and partial; without the routes that start a process or run a tool when ``read_only``."""
    routes: list[BaseRoute] = [
        Route("/", runs.index),
        Route("/runs-table", runs.runs_table),
        Route("/compare", runs.compare),
        Route("/run", run.run_page),
        Route("/api/metrics", run.metrics),
        Route("/banner", run.banner),
        Route("/log", run.log_tail),
        Route("/eval-summary", run.eval_figures),
        Route("/trajectories", trajectories.trajectories),
        Route("/sample", trajectories.sample),
        Route("/tokens", trajectories.token_view),
        Route("/raw", trajectories.raw_line),
        Route("/tools", tools.tools_page),
        Route("/data", data.data_page),
        Route("/config/validate", data.validate, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    if not read_only:
        routes += [
            Route("/tools/call", tools.tool_call, methods=["POST"]),
            Route("/launch", data.launch, methods=["POST"]),
            Route("/stop", data.stop, methods=["POST"]),
            Route("/resume", data.resume, methods=["POST"]),
        ]
    return routes


async def not_found(request: Request, exc: Exception) -> Response:
    """An HTTP error (a 404, a refused name, a bad parameter) as a page that says what was wrong."""
    code = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", str(exc))
    return ui_of(request).templates.TemplateResponse(
        request, "error.html", {"code": code, "detail": detail}, status_code=code
    )


async def failed(request: Request, exc: Exception) -> Response:
    """A bug or an unreadable file: a page that says what failed, not a bare 500."""
    detail = f"this page failed: {type(exc).__name__}: {exc}. The run's files are unchanged; reload to try again."
    return ui_of(request).templates.TemplateResponse(
        request, "error.html", {"code": 500, "detail": detail}, status_code=500
    )
