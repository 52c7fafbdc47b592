"""``rlf ui``: serve the web UI over a folder of runs."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("ui")
@click.argument("runs_dir", metavar="[RUNS_DIR]", default="runs", type=click.Path(file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Default config of the tools and data pages (e.g. the run.yaml you train with).",
)
@click.option(
    "--poll",
    "poll_s",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.2, 60),
    help="Seconds between live updates of curves, banner and log.",
)
def ui(runs_dir: str, host: str, port: int, config_path: str | None, poll_s: float) -> None:
    """Watch runs live, read trajectories token by token, call tools, validate configs and launch runs.

    Reads the run folders under RUNS_DIR (default: runs) and changes them only through its launch page.
    Needs the extra: pip install 'rlfcore[ui]'.
    """
    try:
        import uvicorn

        from rlfcore.ui.app import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"rlf ui needs the ui extra ({exc.name} is missing): pip install 'rlfcore[ui]'"
        ) from None
    root = Path(runs_dir)
    if not root.is_dir():
        raise click.ClickException(f"no such folder: {root} (give the folder your runs are written to)")
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.secho(
            f"warning: serving on {host}: anyone who can reach it can launch runs and call tools", fg="yellow", err=True
        )
    app = create_app(root, config_path, poll_ms=int(poll_s * 1000))
    click.echo(f"rlf ui: http://{host}:{port}/ over {root.resolve()}")
    uvicorn.run(app, host=host, port=port, log_level="warning")
