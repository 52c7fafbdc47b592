"""Running the real ``rlf`` command in its own process, and writing and installing plugin distributions."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import ROOT


def run_rlf(
    *args: str,
    site: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
):
    """Run ``python -m rlfcore ARGS`` in a fresh process, with ``site`` (installed plugins) on the path."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site) if site else "", str(ROOT)) if p)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rlfcore", *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout
    )


def install(dist: Path, site: Path) -> Path:
    """``pip install`` a plugin distribution into its own folder, as a user would (without touching the venv)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(dist),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return site


def write_dist(root: Path, name: str, module: str, code: str, ep_name: str | None = None) -> Path:
    """Write a minimal plugin distribution from scratch: pyproject with the ``rlf`` entry point, one module."""
    dist = root / name
    (dist / module).mkdir(parents=True)
    (dist / module / "__init__.py").write_text(textwrap.dedent(code))
    (dist / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=69"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "1.2.3"

            [project.entry-points.rlf]
            {ep_name or name} = "{module}"

            [tool.setuptools]
            packages = ["{module}"]
            """
        )
    )
    return dist
