"""The small shop database and its questions that ship with the plugin, for tests, docs and examples.

The database is kept as SQL text (``data/shop.sql``) and built into a SQLite file on first use, in the
temporary folder under a name that carries the script's hash, so a changed script gets a new file and
concurrent builders never see a half-written one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any


def shop_sql() -> str:
    return resources.files("rlf_nl2sql").joinpath("data/shop.sql").read_text()


def shop_questions() -> list[dict[str, Any]]:
    """The shop's questions in Spider's format: ``{"question", "query", "db_id": "shop"}``."""
    questions: list[dict[str, Any]] = json.loads(
        resources.files("rlf_nl2sql").joinpath("data/shop_questions.json").read_text()
    )
    return questions


def build_database(script: str, path: Path) -> Path:
    """Run ``script`` into a new SQLite file at ``path`` (written aside, then moved into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    conn = sqlite3.connect(partial)
    try:
        conn.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")  # a fresh file: nothing to protect
        conn.executescript(script)
        conn.commit()
    finally:
        conn.close()
    os.replace(partial, path)
    return path


def shop_db(folder: Path | None = None) -> Path:
    """The shop database file, built if needed (in ``folder``, default a per-version temporary folder)."""
    script = shop_sql()
    if folder is None:
        digest = hashlib.sha256(script.encode()).hexdigest()[:12]
        folder = Path(tempfile.gettempdir()) / f"rlf-nl2sql-shop-{digest}"
    path = folder / "shop.sqlite"
    return path if path.is_file() else build_database(script, path)
