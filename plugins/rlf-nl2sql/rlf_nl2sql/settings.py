"""The ``nl2sql:`` section of a run config, and where each sample's database file is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from rlf_nl2sql.answer import AnswerFormat
from rlf_nl2sql.compare import Tolerance
from rlf_nl2sql.database import DatabaseUnavailable
from rlf_nl2sql.verify import PoolKind, VerifyOptions
from rlfcore import config_dir

if TYPE_CHECKING:
    from rlfcore import RunConfig


class Settings(BaseModel):
    """Every setting has a default, so ``plugins: [nl2sql]`` alone runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db_root: Path | None = Field(
        None, description="Folder that rows' relative `extra.db` paths start from (itself relative to the run config)."
    )
    confine_to_db_root: bool = Field(
        False,
        description="Refuse a row's `extra.db` outside `db_root` (absolute, `..`, a symlink out): for untrusted data.",
    )
    db: Path | None = Field(None, description="Database file for rows that name none (relative to the run config).")
    max_rows: int = Field(20, ge=1, description="Rows of a query result shown to the model.")
    max_chars: int = Field(2000, ge=100, description="Characters of a query result shown to the model.")
    max_cell_chars: int = Field(100, ge=8, description="Characters of one value shown to the model.")
    max_result_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Bytes one `sql` tool query may fetch (all rows and values); a larger result is an error.",
    )
    query_timeout_s: float = Field(2.0, gt=0, description="Time limit of one query the model runs with the `sql` tool.")
    schema_tool: bool = Field(
        False, description="Also offer a `schema` tool (for prompts prepared without the schema)."
    )
    answer_format: AnswerFormat = Field(
        "sql_fence", description="The final answer's expected shape: sql_fence, answer_tag or plain."
    )
    format_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of the reward for answering in `answer_format`; the rest is execution match.",
    )
    verify_timeout_s: float = Field(10.0, gt=0, description="Time limit of each query run to verify an answer.")
    verify_pool: PoolKind = Field(
        "process", description="Verify answers in worker processes or threads (see the benchmark)."
    )
    verify_workers: int = Field(
        0, ge=0, description="Workers verifying answers in parallel; 0: one per CPU, at most 8."
    )
    verify_max_rows: int = Field(
        100_000, ge=1, description="Larger results fail verification instead of filling memory."
    )
    verify_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Bytes a verifying query may fetch; more fails it."
    )
    rel_tol: float = Field(1e-6, ge=0, description="Relative tolerance when comparing numbers.")
    abs_tol: float = Field(1e-9, ge=0, description="Absolute tolerance when comparing numbers.")
    ignore_column_order: bool = Field(
        True, description="Accept the right columns in another order (Spider); false: BIRD."
    )

    def verify_options(self) -> VerifyOptions:
        return VerifyOptions(
            timeout_s=self.verify_timeout_s,
            max_rows=self.verify_max_rows,
            max_bytes=self.verify_max_bytes,
            tolerance=Tolerance(rel=self.rel_tol, abs=self.abs_tol),
            ignore_column_order=self.ignore_column_order,
            answer_format=self.answer_format,
        )


def base_dir(config: RunConfig | None) -> Path:
    """The folder relative paths in settings start from: the run config's (rlfcore's one rule)."""
    return config_dir(config)


@dataclass(frozen=True)
class Locator:
    """Finds a sample's database: its row's ``extra.db`` under ``root``, else ``default``.

    With ``confined``, a row's path must resolve (symlinks followed) inside ``root``; the config's own
    ``default`` is trusted.
    """

    root: Path
    default: Path | None = None
    confined: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, base: Path) -> Locator:
        root = base / settings.db_root if settings.db_root else base
        return cls(root=root, default=base / settings.db if settings.db else None, confined=settings.confine_to_db_root)

    def locate(self, extra: Mapping[str, Any] | None) -> Path | None:
        """The database file, or ``None`` when none is named; :class:`DatabaseUnavailable` when the row's
        path leaves a confined root."""
        name = (extra or {}).get("db")
        if not name:
            return self.default
        path = Path(str(name))
        path = path if path.is_absolute() else self.root / path
        if self.confined and not path.resolve().is_relative_to(self.root.resolve()):
            raise DatabaseUnavailable(
                f"extra.db {str(name)!r} is outside nl2sql.db_root ({self.root}), which nl2sql.confine_to_db_root forbids"
            )
        return path


def row_extra(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """A raw dataset row's ``extra`` (rlf's layout) or ``extra_info`` (verl's)."""
    extra = row.get("extra", row.get("extra_info"))
    return extra if isinstance(extra, Mapping) else {}
