"""The ``rlf ui`` web app: Starlette routes over run folders, Jinja pages, htmx partials, JSON for curves.

Pages read only what they show: the runs list reads each run's last metrics line, trajectory pages
read the lines of one page of groups through a byte-offset index, and live curves fetch the metrics
appended since the offset the page last saw.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rlfcore.ui import runs as rd
from rlfcore.ui.access import Access, Secret, new_token
from rlfcore.ui.allowed import Refused, Roots, check_overrides
from rlfcore.ui.launch import Launcher, LaunchError, dry_run
from rlfcore.ui.records import LINE_BYTES, shown, too_big
from rlfcore.ui.samples import SampleFiles, sample_files, step_of
from rlfcore.ui.tokens import load as load_tokenizer
from rlfcore.ui.tokens import tokenizer_dir, tokens
from rlfcore.ui.toolbench import ToolBench, tool_stats

HERE = Path(__file__).parent
GROUPS_PER_PAGE = 10
LOG_LINES = 60
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")  # as Starlette reads a Host header: IPv6 in brackets


class State:
    """What the app shares across requests."""

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
    state = State(root_path, config_file, poll_ms, Roots(folders), Secret(token or new_token()), read_only)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["num"] = _num
    templates.env.filters["dur"] = _dur
    templates.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    templates.env.globals["poll_ms"] = poll_ms
    templates.env.globals["example"] = example_arguments
    templates.env.globals["csrf"] = state.secret.csrf
    templates.env.globals["read_only"] = read_only

    def page(request: Request, name: str, **ctx: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, {"root": state.root, **ctx})

    def run_path(request: Request) -> Path:
        name = request.query_params.get("run", "")
        try:
            return rd.resolve_run(state.root, name)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    def sample_file(request: Request, run: Path) -> Path:
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

    def allowed_config(raw: str | Path) -> Path:
        try:
            return state.roots.config(raw, state.root)
        except Refused as exc:
            raise HTTPException(403, str(exc)) from None

    def config_path(request: Request, run: Path | None = None) -> Path | None:
        raw = request.query_params.get("config")
        if raw:
            return allowed_config(raw)
        if run is not None:
            launched = Launcher.record(run)
            if launched and launched.get("config"):
                return allowed_config(str(launched["config"]))
            if (run / "config.yaml").exists():
                return allowed_config(run / "config.yaml")
        return state.config

    def allowed_overrides(raw: str) -> list[str]:
        try:
            return check_overrides(_overrides(raw))
        except Refused as exc:
            raise HTTPException(403, str(exc)) from None

    # --- runs ------------------------------------------------------------------------------------

    async def index(request: Request) -> HTMLResponse:
        found = await run_in_threadpool(rd.find_runs, state.root)
        return page(request, "runs.html", runs=found, now=time.time())

    async def runs_table(request: Request) -> HTMLResponse:
        found = await run_in_threadpool(rd.find_runs, state.root)
        return page(request, "_runs_table.html", runs=found, now=time.time())

    async def compare(request: Request) -> HTMLResponse:
        names = request.query_params.getlist("run")
        for n in names:
            run_path_of(n)
        return page(request, "compare.html", names=names)

    def run_path_of(name: str) -> Path:
        try:
            return rd.resolve_run(state.root, name)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    async def run_page(request: Request) -> HTMLResponse:
        run = run_path(request)
        info = rd.run_info(state.root, run)
        return page(
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
        run = run_path(request)
        name = request.query_params.get("file", "metrics.jsonl")
        if name not in ("metrics.jsonl", "sft_metrics.jsonl"):
            raise HTTPException(400, f"file must be metrics.jsonl or sft_metrics.jsonl, not {name!r}")
        offset = _int_param(request, "offset", 0)
        rows, end = (
            rd.read_metrics_from(run, offset) if name == "metrics.jsonl" else rd.read_jsonl_from(run / name, offset)
        )
        return JSONResponse({"rows": rows, "offset": end, "status": rd.status(run)})

    async def banner(request: Request) -> HTMLResponse:
        run = run_path(request)
        found = await run_in_threadpool(_warnings, run, state.samples)
        return page(request, "_banner.html", warnings=found)

    async def log_tail(request: Request) -> HTMLResponse:
        run = run_path(request)
        path = await run_in_threadpool(rd.log_file, run)
        lines = await run_in_threadpool(rd.tail_lines, path, LOG_LINES) if path else []
        return page(request, "_log.html", lines=lines, path=path, status=rd.status(run))

    # --- trajectories ----------------------------------------------------------------------------

    async def trajectories(request: Request) -> HTMLResponse:
        run = run_path(request)
        path = sample_file(request, run)
        index = await run_in_threadpool(state.samples.get, path)
        q = request.query_params
        try:
            keep = index.filter(
                min_reward=_float(q.get("min_reward")),
                max_reward=_float(q.get("max_reward")),
                stop_reason=q.get("stop") or None,
                tool_error=q.get("tool_error") == "1",
                env=q.get("env") or None,
                mismatch=q.get("mismatch") == "1",
                search=q.get("q") or None,
            )
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        kept = set(keep)
        groups = [(row, [i for i in members if i in kept]) for row, members in index.groups.items()]
        groups = [(row, members) for row, members in groups if members]
        page_no = _int_param(request, "page", 0)
        pages = max(1, -(-len(groups) // GROUPS_PER_PAGE))
        shown = groups[page_no * GROUPS_PER_PAGE : (page_no + 1) * GROUPS_PER_PAGE]
        entries = index.entries
        return page(
            request,
            "trajectories.html",
            run=rd.run_info(state.root, run),
            file=path,
            files=sample_files(run),
            groups=[(row, [(i, entries[i]) for i in members], _spread(entries, members)) for row, members in shown],
            page_no=page_no,
            pages=pages,
            matched=len(keep),
            total=len(entries),
            q=q,
            stop_reasons=index.stop_reasons(),
            envs=index.envs(),
            step_of=step_of,
        )

    async def sample(request: Request) -> HTMLResponse:
        run = run_path(request)
        path = sample_file(request, run)
        index = await run_in_threadpool(state.samples.get, path)
        picked = [_index_param(request, k, len(index.entries)) for k in ("i", "j") if k in request.query_params]
        if not picked:
            raise HTTPException(400, "give the sample's index as ?i=N (and ?j=M to compare two)")
        records = [(i, await run_in_threadpool(_record, index, i)) for i in picked]
        siblings = index.groups.get(index.entries[picked[0]].row_id, [])
        return page(
            request,
            "sample.html",
            run=rd.run_info(state.root, run),
            file=path,
            records=records,
            siblings=siblings,
            turns=_turns,
        )

    async def token_view(request: Request) -> HTMLResponse:
        run = run_path(request)
        path = sample_file(request, run)
        index = await run_in_threadpool(state.samples.get, path)
        i = _index_param(request, "i", len(index.entries))
        record = await run_in_threadpool(_record, index, i)
        where = tokenizer_dir(run, rd.read_config(run))
        tok = await run_in_threadpool(load_tokenizer, str(where)) if where else None
        toks, at = tokens(record, tok)
        return page(
            request,
            "tokens.html",
            run=rd.run_info(state.root, run),
            file=path,
            i=i,
            record=record,
            tokens=toks,
            mismatch_at=at,
            tokenizer=where,
        )

    async def raw_line(request: Request) -> Response:
        """One stored line as it is, for records the pages show cut."""
        run = run_path(request)
        path = sample_file(request, run)
        index = await run_in_threadpool(state.samples.get, path)
        i = _index_param(request, "i", len(index.entries))
        return StreamingResponse(index.raw(i), media_type="application/json")

    # --- tools -----------------------------------------------------------------------------------

    async def tools_page(request: Request) -> HTMLResponse:
        run = run_path(request) if request.query_params.get("run") else None
        cfg = config_path(request, run)
        error, found, stats = None, {}, {}
        if cfg is None:
            error = "no config: open this page from a run, or give ?config=PATH (or start rlf ui with --config)"
        else:
            try:
                found = await run_in_threadpool(state.bench.tools, cfg)
            except Exception as exc:  # a config or plugin error is shown, not raised
                error = _explain(exc)
        if run is not None:
            stats = await run_in_threadpool(_run_tool_stats, run, state.samples)
        return page(
            request,
            "tools.html",
            config=cfg,
            tools=found,
            error=error,
            stats=stats,
            run=rd.run_info(state.root, run) if run else None,
        )

    async def tool_call(request: Request) -> HTMLResponse:
        form = await request.form()
        cfg = allowed_config(str(form.get("config", "")))
        started = time.perf_counter()
        try:
            result = await run_in_threadpool(
                state.bench.call,
                cfg,
                str(form.get("plugin", "")),
                str(form.get("name", "")),
                str(form.get("arguments", "")),
            )
            error = None
        except Exception as exc:
            result, error = None, _explain(exc)
        return page(request, "_tool_result.html", result=result, error=error, wall_s=time.perf_counter() - started)

    # --- data, config and launch -----------------------------------------------------------------

    async def data_page(request: Request) -> HTMLResponse:
        cfg = config_path(request)
        overrides = allowed_overrides(request.query_params.get("overrides", ""))
        preview = (
            await run_in_threadpool(_preview, state, cfg, overrides, _int_param(request, "rows", 5)) if cfg else None
        )
        return page(
            request,
            "data.html",
            config=cfg,
            preview=preview,
            overrides=" ".join(overrides),
            text=cfg.read_text() if cfg and cfg.is_file() else "",
        )

    async def validate(request: Request) -> HTMLResponse:
        form = await request.form()
        text = str(form.get("text", ""))
        raw = str(form.get("config") or "")
        base = allowed_config(raw).parent if raw else state.root
        try:
            state.roots.check_text(text, base)
            overrides = check_overrides(_overrides(str(form.get("overrides", ""))))
        except Refused as exc:
            return page(request, "_validation.html", issues=[{"path": "(refused)", "message": str(exc)}], resolved=None)
        issues, resolved = await run_in_threadpool(_validate, text, overrides, base)
        return page(request, "_validation.html", issues=issues, resolved=resolved)

    async def launch(request: Request) -> Response:
        form = await request.form()
        kind = str(form.get("kind", "train"))
        try:
            cfg = state.roots.config(str(form.get("config", "")), state.root)
            overrides = check_overrides(_overrides(str(form.get("overrides", ""))))
        except Refused as exc:
            return page(request, "_message.html", error=str(exc))
        name = str(form.get("run_name") or f"{cfg.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
        target = (state.root / name).resolve()
        if not target.is_relative_to(state.root) or target == state.root:
            return page(request, "_message.html", error=f"run name {name!r} must be a folder under {state.root}")
        if kind == "verl":
            rc, out, argv = await run_in_threadpool(dry_run, cfg, target, overrides)
            return page(request, "_dry_run.html", rc=rc, output=out, command=shlex.join(argv[2:]))
        try:
            state.launcher.start(kind, cfg, target, overrides)
        except LaunchError as exc:
            return page(request, "_message.html", error=str(exc))
        url = f"/run?run={rd.run_name(state.root, target)}"
        return (
            Response(headers={"HX-Redirect": url}) if request.headers.get("HX-Request") else RedirectResponse(url, 303)
        )

    async def stop(request: Request) -> Response:
        run = run_path(request)
        rc = await run_in_threadpool(state.launcher.stop, run)
        msg = (
            f"stopped (exit code {rc})"
            if rc is not None
            else "this UI started no process for that run, or it already ended"
        )
        return page(request, "_message.html", message=msg)

    async def resume(request: Request) -> Response:
        run = run_path(request)
        record = Launcher.record(run) or {}
        cfg = config_path(request, run)
        if cfg is None or not record:
            return page(
                request,
                "_message.html",
                error="only runs started from the launch page can be resumed here; "
                f"from a shell: rlf train CONFIG --run-dir {run} --resume",
            )
        try:
            overrides = check_overrides(str(o) for o in record.get("overrides", []))
            state.launcher.start("train", cfg, run, overrides, resume=True)
        except Refused as exc:
            return page(request, "_message.html", error=str(exc))
        except LaunchError as exc:
            return page(request, "_message.html", error=str(exc))
        return page(request, "_message.html", message="resumed")

    async def not_found(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", str(exc))
        return templates.TemplateResponse(request, "error.html", {"code": code, "detail": detail}, status_code=code)

    async def failed(request: Request, exc: Exception) -> Response:
        """A bug or an unreadable file: a page that says what failed, not a bare 500."""
        detail = f"this page failed: {type(exc).__name__}: {exc}. The run's files are unchanged; reload to try again."
        return templates.TemplateResponse(request, "error.html", {"code": 500, "detail": detail}, status_code=500)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        state.launcher.stop_all()
        state.bench.close()

    routes = [
        Route("/", index),
        Route("/runs-table", runs_table),
        Route("/compare", compare),
        Route("/run", run_page),
        Route("/api/metrics", metrics),
        Route("/banner", banner),
        Route("/log", log_tail),
        Route("/trajectories", trajectories),
        Route("/sample", sample),
        Route("/tokens", token_view),
        Route("/raw", raw_line),
        Route("/tools", tools_page),
        Route("/data", data_page),
        Route("/config/validate", validate, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    if not read_only:  # the routes that start a process or run a tool
        routes += [
            Route("/tools/call", tool_call, methods=["POST"]),
            Route("/launch", launch, methods=["POST"]),
            Route("/stop", stop, methods=["POST"]),
            Route("/resume", resume, methods=["POST"]),
        ]
    middleware = [
        Middleware(
            TrustedHostMiddleware,
            allowed_hosts=[*LOCAL_HOSTS, *(f"[{h}]" if ":" in h else h for h in hosts or [])],
            www_redirect=False,
        ),
        Middleware(Access, secret=state.secret),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: not_found, Exception: failed},
    )
    app.state.ui = state
    return app


# --- helpers ---------------------------------------------------------------------------------------


def example_arguments(schema: Any) -> str:
    """A JSON object to start the tool form from: each property's default, else a placeholder of its type."""
    placeholders = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    out = {}
    for name, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        out[name] = spec["default"] if "default" in spec else placeholders.get(str(spec.get("type")), "")
    return json.dumps(out, ensure_ascii=False)


def _warnings(run: Path, files: SampleFiles) -> list[str]:
    metrics = rd.read_metrics_tail(run, 50)
    found = sample_files(run)
    last: list[dict[str, Any]] = []
    if found:
        index = files.get(found[-1])
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
    return rd.warnings(metrics, last)


def _record(index: Any, i: int) -> dict[str, Any]:
    """Entry ``i`` as the pages show it (see :mod:`rlfcore.ui.records`)."""
    entry = index.entries[i]
    if entry.length > LINE_BYTES:
        return too_big(entry.id, entry.length)
    try:
        return shown(index.read(i))
    except ValueError as exc:
        return shown({"id": entry.id, "error": f"the line is not JSON any more ({exc}): was the file rewritten?"})


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


def _turns(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages as turns: each assistant message with the tool results that answer its calls."""
    out: list[dict[str, Any]] = []
    for m in record.get("messages") or []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" and out and out[-1]["message"].get("role") == "assistant":
            out[-1]["results"].append(m)
        else:
            out.append({"message": m, "results": []})
    return out


def _spread(entries: list[Any], members: list[int]) -> float | None:
    rewards = [entries[i].reward for i in members if entries[i].reward is not None]
    return max(rewards) - min(rewards) if len(rewards) > 1 else None


def _preview(state: State, cfg: Path, overrides: list[str], n: int) -> dict[str, Any]:
    """A dataset's first rows rendered as the model sees them, with token counts and a length histogram."""
    from rlfcore.config import ConfigError, load_config
    from rlfcore.data import read_rows

    try:
        config, _ = load_config(cfg, overrides)
    except ConfigError as exc:
        return {"error": exc.render()}
    except Exception as exc:
        return {"error": _explain(exc)}
    data = config.data.train or config.data.eval
    if not data:
        return {"error": "the config names no data: set data.train or data.eval"}
    path = config.path(data)
    out: dict[str, Any] = {
        "path": str(path),
        "rows": [],
        "limits": {
            "max_total_tokens": config.rollout.max_total_tokens,
            "max_response_tokens": config.rollout.max_response_tokens,
        },
    }
    try:
        rows = read_rows(path, limit=200)
    except Exception as exc:
        return {**out, "error": _explain(exc)}
    tok = None
    model = config.model.tokenizer or config.model.path
    if model:
        where = config.path(model)
        if (where / "tokenizer_config.json").exists():
            from rlfcore.chat import load_tokenizer as load_chat_tokenizer

            tok = load_chat_tokenizer(str(where))
    out["tokenizer"] = str(model) if tok else None
    runtime = None
    try:
        runtime = state.bench.runtime(cfg) if not overrides else None
    except Exception as exc:
        out["tools_error"] = _explain(exc)
    lengths = []
    for k, row in enumerate(rows):
        schemas = (
            [
                t.schema()
                for t in runtime.tools_for(runtime.env_of(row.raw or {"env": row.env}) if runtime else None).values()
            ]
            if runtime
            else []
        )
        text = tok.render(list(row.prompt), schemas, add_generation_prompt=True) if tok else None
        count = len(tok.encode(text)) if tok and text is not None else None
        if count is not None:
            lengths.append(count)
        if k < n:
            out["rows"].append({"id": row.id, "env": row.env, "prompt": row.prompt, "rendered": text, "tokens": count})
    out["histogram"] = _histogram(lengths)
    out["counted"] = len(lengths)
    return out


def _histogram(values: list[int], bins: int = 12) -> list[tuple[str, int]]:
    if not values:
        return []
    lo, hi = min(values), max(values)
    width = max(1, -(-(hi - lo + 1) // bins))
    counts: dict[int, int] = {}
    for v in values:
        counts[(v - lo) // width] = counts.get((v - lo) // width, 0) + 1
    return [(f"{lo + b * width}-{lo + (b + 1) * width - 1}", counts.get(b, 0)) for b in range((hi - lo) // width + 1)]


def _validate(text: str, overrides: list[str], config: Path) -> tuple[list[dict[str, str]], str | None]:
    """Every mistake of a config's YAML text, at its dotted path; or none and the resolved config."""
    import yaml

    from rlfcore.config import ConfigError, load_config

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return [{"path": "(yaml)", "message": f"{where}{getattr(exc, 'problem', None) or exc}"}], None
    if not isinstance(data, dict):
        return [{"path": "(top level)", "message": f"expected a mapping of settings, got {type(data).__name__}"}], None
    try:
        cfg, _ = load_config(data, overrides)
    except ConfigError as exc:
        return [{"path": i.path or "(top level)", "message": i.message} for i in exc.issues], None
    except Exception as exc:
        return [{"path": "(plugins)", "message": _explain(exc)}], None
    return [], yaml.safe_dump(cfg.resolved(), sort_keys=False)


def _explain(exc: BaseException) -> str:
    render = getattr(exc, "render", None)
    return render() if callable(render) else f"{type(exc).__name__}: {exc}"


def _overrides(raw: str) -> list[str]:
    try:
        return shlex.split(raw)
    except ValueError:
        return raw.split()


def _int_param(request: Request, key: str, default: int) -> int:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        return max(0, int(raw))
    except ValueError:
        raise HTTPException(400, f"{key} must be a whole number, not {raw!r}") from None


def _index_param(request: Request, key: str, n: int) -> int:
    i = _int_param(request, key, 0)
    if i >= n:
        raise HTTPException(404, f"{key}={i}: the file holds {n} samples")
    return i


def _float(raw: str | None) -> float | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"not a number: {raw!r}") from None


def _num(v: Any, digits: int = 3) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"


def _dur(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "–"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
