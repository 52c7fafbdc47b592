"""``rlf ui``: serve the web UI over a folder of runs."""

from __future__ import annotations

import socket
from pathlib import Path

import click


@click.command("ui")
@click.argument("runs_dir", metavar="[RUNS_DIR]", default="runs", type=click.Path(file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free one).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Default config of the tools and data pages (e.g. the run.yaml you train with); its folder is served too.",
)
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="Another folder whose configs the pages may read and launch (repeatable).",
)
@click.option(
    "--allow-host",
    "hosts",
    multiple=True,
    help="A Host name to accept besides loopback's and --host (repeatable; e.g. behind a proxy).",
)
@click.option(
    "--token",
    envvar="RLF_UI_TOKEN",
    help="The secret every request needs (default: a new one each start; env RLF_UI_TOKEN).",
)
@click.option("--read-only", is_flag=True, help="No launching, stopping, resuming or tool calls: only reading.")
@click.option(
    "--poll",
    "poll_s",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.2, 60),
    help="Seconds between live updates of curves, banner and log.",
)
def ui(
    runs_dir: str,
    host: str,
    port: int,
    config_path: str | None,
    roots: tuple[str, ...],
    hosts: tuple[str, ...],
    token: str | None,
    read_only: bool,
    poll_s: float,
) -> None:
    """Watch runs live, read trajectories token by token, call tools, validate configs and launch runs.

    Reads the run folders under RUNS_DIR (default: runs) and changes them only through its launch page.
    Every request needs the token in the printed URL (then a cookie). Needs the extra: pip install 'rlfcore[ui]'.
    """
    try:
        import uvicorn

        from rlfcore.ui.access import MIN_TOKEN_CHARS, new_token
        from rlfcore.ui.app import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"rlf ui needs the ui extra ({exc.name} is missing): pip install 'rlfcore[ui]'"
        ) from None
    root = Path(runs_dir)
    if not root.is_dir():
        raise click.ClickException(f"no such folder: {root} (give the folder your runs are written to)")
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise click.BadParameter(f"must be at least {MIN_TOKEN_CHARS} characters", param_hint="--token")
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.secho(
            f"warning: serving on {host}: anyone who can reach it and holds the token can launch runs and call tools",
            fg="yellow",
            err=True,
        )
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    secret = token or new_token()
    app = create_app(
        root,
        config_path,
        poll_ms=int(poll_s * 1000),
        token=secret,
        hosts=[host, *hosts],
        roots=list(roots),
        read_only=read_only,
    )
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"rlf ui: http://{shown}:{bound}/?token={secret} over {root.resolve()}{' (read-only)' if read_only else ''}"
    )
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the URL is printed, so a busy port is a clear error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another rlf ui running there? try --port 0)"
        ) from None
    return sock
