"""rlf dataset rows in verl's parquet layout.

verl's dataset reads ``prompt`` (chat messages), ``data_source``, ``agent_name``, ``reward_model``
and ``extra_info`` (with ``index``). The whole rlf row also travels, as JSON in
``extra_info.rlf_row``, so the agent loop rebuilds exactly the row the local path would see (its
environment, id, ground truth and any plugin fields), whatever parquet does to nested types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfcore.backends.verl import AGENT_NAME
from rlfcore.data import Row, normalize_row

if TYPE_CHECKING:
    from rlfcore.runtime import Runtime


def verl_record(row: Row, index: int, env: str | None) -> dict[str, Any]:
    """One row as verl expects it; ``env`` is the environment the rlf runtime routes it to."""
    truth = row.ground_truth
    return {
        "data_source": env or "",
        "agent_name": AGENT_NAME,
        "prompt": [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in row.prompt],
        "reward_model": {"style": "rule", "ground_truth": truth if isinstance(truth, str) else json.dumps(truth)},
        "extra_info": {"index": index, "id": row.id, "rlf_row": json.dumps(row.raw, ensure_ascii=False, default=str)},
    }


def row_from_verl(kwargs: dict[str, Any]) -> Row:
    """The rlf row of one verl sample (the agent loop's kwargs), from ``extra_info.rlf_row`` when present."""
    extra = kwargs.get("extra_info") or {}
    if "rlf_row" in extra:
        return normalize_row(json.loads(extra["rlf_row"]), int(extra.get("index", 0)), "verl sample")
    raw = {
        "prompt": [dict(m) for m in kwargs.get("raw_prompt", [])],
        "data_source": kwargs.get("data_source"),
        "reward_model": dict(kwargs.get("reward_model") or {}),
        "extra_info": dict(extra),
        "id": extra.get("id", extra.get("index", kwargs.get("index", 0))),
    }
    return normalize_row(raw, int(extra.get("index", 0)), "verl sample")


def write_parquet(rows: list[Row], path: str | Path, runtime: Runtime) -> Path:
    """Write ``rows`` in verl's layout to ``path``; routing errors name the row, as in the local path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [
        verl_record(row, i, runtime.env_of(row.raw or {"env": row.env, "id": row.id})) for i, row in enumerate(rows)
    ]
    if not records:
        raise ValueError(f"no rows to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path)
    return path
