"""What every view of ``rlf ui`` shares, as ``request.app.state.ui``: the served folders and the secret,
the sample-file indexes, tool runtimes and launched processes, the templates, and the helpers that turn
a request's names (``?run=``, ``?file=``, ``?config=``, overrides) into things the UI may read, or into
the 403 or 404 that says why not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from rlfcore.ui import runs as rd
from rlfcore.ui.access import Secret
from rlfcore.ui.allowed import Refused, Roots, check_overrides
from rlfcore.ui.launch import Launcher
from rlfcore.ui.params import split_overrides
from rlfcore.ui.samples import SampleFiles, SampleIndex, sample_files
from rlfcore.ui.templating import templates
from rlfcore.ui.toolbench import ToolBench


class UI:
    """One app's shared state and request helpers; made by ``create_app``, closed when the app stops."""

    def __init__(
        self, root: Path, config: Path | None, poll_ms: int, roots: Roots, secret: Secret, read_only: bool
    ) -> None:
        self.root = root
        self.config = config
        self.poll_ms = poll_ms
        self.roots = roots
        self.secret = secret
        self.read_only = read_only
        self.samples = SampleFiles()
        self.bench = ToolBench()
        self.launcher = Launcher()
        self.templates = templates(poll_ms, secret.csrf, read_only)

    def close(self) -> None:
        """Stop the processes the UI launched and the tool servers its bench started."""
        self.launcher.stop_all()
        self.bench.close()

    def page(self, request: Request, name: str, **ctx: Any) -> HTMLResponse:
        return self.templates.TemplateResponse(request, name, {"root": self.root, **ctx})

    def run_named(self, name: str) -> Path:
        """The run folder ``name`` under the root, or 404."""
        try:
            return rd.resolve_run(self.root, name)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    def run_path(self, request: Request) -> Path:
        """The run folder of ``?run=``, or 404."""
        return self.run_named(request.query_params.get("run", ""))

    def sample_file(self, request: Request, run: Path) -> Path:
        """The sample file of ``?file=`` in ``run`` (its newest when not given), or 404."""
        files = sample_files(run)
        name = request.query_params.get("file")
        if not files:
            raise HTTPException(404, f"run {run.name} has no samples yet")
        if name is None:
            return files[-1]
        for f in files:
            if f.name == name:
                return f
        raise HTTPException(404, f"run {run.name} has no sample file {name!r}")

    async def sample_index(self, request: Request) -> tuple[Path, Path, SampleIndex]:
        """The run, sample file and its index that a trajectory page's ``?run=&file=`` name (the index
        built or extended off the event loop)."""
        run = self.run_path(request)
        path = self.sample_file(request, run)
        return run, path, await run_in_threadpool(self.samples.get, path)

    def allowed_config(self, raw: str | Path) -> Path:
        """The config file ``raw`` when it lies in the served folders (see :class:`Roots`), else 403."""
        try:
            return self.roots.config(raw, self.root)
        except Refused as exc:
            raise HTTPException(403, str(exc)) from None

    def config_path(self, request: Request, run: Path | None = None) -> Path | None:
        """The config a page opens with: ``?config=``, else the one ``run`` was launched or trained with,
        else ``--config``."""
        raw = request.query_params.get("config")
        if raw:
            return self.allowed_config(raw)
        if run is not None:
            launched = Launcher.record(run)
            if launched and launched.get("config"):
                return self.allowed_config(str(launched["config"]))
            if (run / "config.yaml").exists():
                return self.allowed_config(run / "config.yaml")
        return self.config

    def allowed_overrides(self, raw: str) -> list[str]:
        """The overrides in ``raw`` when the allow-list takes every one, else 403 naming those it refuses."""
        try:
            return check_overrides(split_overrides(raw))
        except Refused as exc:
            raise HTTPException(403, str(exc)) from None


def ui_of(request: Request) -> UI:
    """The shared context of the app serving ``request``."""
    ui: UI = request.app.state.ui
    return ui
