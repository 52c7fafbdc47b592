"""The data page and what it starts: a dataset previewed, a config validated, a run launched, and a
launched run stopped or resumed.

Every config and override a request names passes the served folders and the allow-list first
(:mod:`rlfcore.ui.allowed`); a refusal is shown on the page, never acted on.
"""

from __future__ import annotations

import shlex
import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from rlfcore.ui import configs
from rlfcore.ui import runs as rd
from rlfcore.ui.allowed import Refused, check_overrides, refuse_local_plugins
from rlfcore.ui.context import ui_of
from rlfcore.ui.launch import Launcher, LaunchError, dry_run
from rlfcore.ui.params import int_param, split_overrides


async def data_page(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    cfg = ui.config_path(request)
    overrides = ui.allowed_overrides(request.query_params.get("overrides", ""))
    preview = (
        await run_in_threadpool(
            configs.preview, ui.bench, cfg, overrides, int_param(request, "rows", 5), ui.roots, not ui.read_only
        )
        if cfg
        else None
    )
    return ui.page(
        request,
        "data.html",
        config=cfg,
        preview=preview,
        overrides=" ".join(overrides),
        text=cfg.read_text() if cfg and cfg.is_file() else "",
    )


async def validate(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    form = await request.form()
    # Line ends as a file read gives them: the loader reads the text back from a file, header line included.
    text = str(form.get("text", "")).replace("\r\n", "\n").replace("\r", "\n")
    raw = str(form.get("config") or "")
    source = ui.allowed_config(raw) if raw else ui.root / "config.yaml"  # typed afresh: read from the runs folder
    try:
        if ui.read_only:
            refuse_local_plugins(text)
        ui.roots.check_text(text, source)
        overrides = check_overrides(split_overrides(str(form.get("overrides", ""))))
    except Refused as exc:
        return ui.page(request, "_validation.html", issues=[{"path": "(refused)", "message": str(exc)}], resolved=None)
    issues, resolved = await run_in_threadpool(configs.validate, text, overrides, source)
    return ui.page(request, "_validation.html", issues=issues, resolved=resolved)


async def launch(request: Request) -> Response:
    ui = ui_of(request)
    form = await request.form()
    kind = str(form.get("kind", "train"))
    try:
        cfg = ui.roots.config(str(form.get("config", "")), ui.root)
        overrides = check_overrides(split_overrides(str(form.get("overrides", ""))))
    except Refused as exc:
        return ui.page(request, "_message.html", error=str(exc))
    name = str(form.get("run_name") or f"{cfg.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    target = (ui.root / name).resolve()
    if not target.is_relative_to(ui.root) or target == ui.root:
        return ui.page(request, "_message.html", error=f"run name {name!r} must be a folder under {ui.root}")
    if kind == "verl":
        rc, out, argv = await run_in_threadpool(dry_run, cfg, target, overrides)
        return ui.page(request, "_dry_run.html", rc=rc, output=out, command=shlex.join(argv[2:]))
    try:
        ui.launcher.start(kind, cfg, target, overrides)
    except LaunchError as exc:
        return ui.page(request, "_message.html", error=str(exc))
    url = f"/run?run={rd.run_name(ui.root, target)}"
    return Response(headers={"HX-Redirect": url}) if request.headers.get("HX-Request") else RedirectResponse(url, 303)


async def stop(request: Request) -> Response:
    ui = ui_of(request)
    run = ui.run_path(request)
    rc = await run_in_threadpool(ui.launcher.stop, run)
    msg = (
        f"stopped (exit code {rc})"
        if rc is not None
        else "this UI started no process for that run, or it already ended"
    )
    return ui.page(request, "_message.html", message=msg)


async def resume(request: Request) -> Response:
    ui = ui_of(request)
    run = ui.run_path(request)
    record = Launcher.record(run) or {}
    cfg = ui.config_path(request, run)
    if cfg is None or not record:
        return ui.page(
            request,
            "_message.html",
            error="only runs started from the launch page can be resumed here; "
            f"from a shell: rlf train CONFIG --run-dir {run} --resume",
        )
    try:
        overrides = check_overrides(str(o) for o in record.get("overrides", []))
        ui.launcher.start("train", cfg, run, overrides, resume=True)
    except Refused as exc:
        return ui.page(request, "_message.html", error=str(exc))
    except LaunchError as exc:
        return ui.page(request, "_message.html", error=str(exc))
    return ui.page(request, "_message.html", message="resumed")
