"""The plugin on real data: GeoQuery's 872 questions and its SQLite database (``../shared/data``).

Every check goes through rlf's loop and reward pipeline with a scripted policy: the rows come from
the preparation command's function, the answers are the gold SQL, a perturbation of it, or
destructive statements sent to the ``sql`` tool.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from rlf_nl2sql.database import Session
from rlf_nl2sql.perturb import Facts, perturb
from rlf_nl2sql.prepare import prepare, read_records

from rlfcore.testing import rollout

DESTRUCTIVE = [
    "DROP TABLE city",
    "DELETE FROM state",
    "UPDATE river SET length = 0",
    "INSERT INTO lake VALUES ('new', 1.0, 'usa', 'texas')",
    "ATTACH DATABASE 'other.db' AS other",
    "PRAGMA writable_schema = 1",
    "PRAGMA journal_mode = DELETE",
    "CREATE TABLE t (x)",
    "ALTER TABLE city ADD COLUMN mayor TEXT",
    "VACUUM",
    "WITH x AS (SELECT 1) DELETE FROM border_info",
    "SELECT 1; DROP TABLE state",
]
BIG = {"rollout": {"max_response_tokens": 8192, "max_total_tokens": 16384, "sampling": {"max_tokens": 2048}}}
"""The byte tokenizer makes every byte a token: room for a schema prompt and long calls."""


@pytest.fixture
def geoquery(shared_data: Path) -> Path:
    folder = shared_data / "nl2sql" / "geoquery"
    if not (folder / "geoquery.jsonl").is_file():
        pytest.skip(f"GeoQuery not found in {folder}")
    return folder


@pytest.fixture
def rows(geoquery) -> list[dict]:
    prepared = prepare(read_records(geoquery / "geoquery.jsonl"), geoquery, source="geoquery")
    assert len(prepared.rows) == 872
    return prepared.rows


def config(db_root: Path, **more) -> dict:
    return {"plugins": ["nl2sql"], "nl2sql": {"db_root": str(db_root)}, **BIG, **more}


def sql_call(query: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'sql', 'arguments': {'query': query}})}</tool_call>"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_gold_scores_one_and_perturbed_scores_zero_on_almost_all(geoquery, rows):
    with Session(geoquery / "geography.sqlite") as session:
        facts = Facts(session)
        perturbed = {r["id"]: perturb(r["ground_truth"], facts) for r in rows}
    assert all(perturbed.values()), [k for k, v in perturbed.items() if v is None]
    script = {}
    for r in rows:
        script[r["id"]] = [f"```sql\n{r['ground_truth']}\n```"]
        script[r["id"] + "~"] = [f"```sql\n{perturbed[r['id']].sql}\n```"]
    twins = [{**r, "id": r["id"] + "~"} for r in rows]
    trajs = rollout(config(geoquery), rows + twins, script)
    gold = [t for t in trajs if not t.row_id.endswith("~")]
    near = [t for t in trajs if t.row_id.endswith("~")]
    assert len(gold) == len(near) == 872
    assert [t.row_id for t in gold if t.reward != 1.0] == []
    assert all(t.reward_error is None and t.stop_reason == "no_tool_call" for t in trajs)
    zeros = sum(t.reward == 0.0 for t in near)
    assert zeros / len(near) >= 0.95, f"only {zeros} of {len(near)} perturbed queries scored 0"
    kinds = Counter(perturbed[t.row_id[:-1]].kind for t in near)
    assert kinds["literal"] > 400 and kinds["column"] > 100  # both kinds of near miss are exercised


@pytest.mark.parametrize("copy", [False, True], ids=["shared file", "writable copy"])
def test_destructive_statements_are_tool_errors_and_never_change_the_database(geoquery, rows, tmp_path, copy):
    """On the shared file (read-only on disk) and on a writable copy, where only the plugin's guards hold."""
    root = geoquery
    if copy:
        root = tmp_path
        shutil.copyfile(geoquery / "geography.sqlite", root / "geography.sqlite")
        (root / "geography.sqlite").chmod(0o644)
    db = root / "geography.sqlite"
    before = sha256(db)
    row = rows[0]
    attack = "\n".join(sql_call(s) for s in DESTRUCTIVE)
    script = {row["id"]: [attack, sql_call("SELECT COUNT(*) FROM city"), f"```sql\n{row['ground_truth']}\n```"]}
    [t] = rollout(config(root), [row], script)
    results = [m["content"] for m in t.messages if m["role"] == "tool"]
    assert t.tool_calls == len(DESTRUCTIVE) + 1 and t.tool_errors == len(DESTRUCTIVE), results
    assert t.tool_error_kinds == {"exception": len(DESTRUCTIVE)}
    assert all("not allowed" in r or "one statement" in r for r in results[:-1]), results
    assert results[-1] == "COUNT(*)\n386\n(1 row)"  # the city table is whole
    assert t.reward == 1.0
    assert sha256(db) == before
    if copy:  # no journal left behind, no attached database created
        assert [p.name for p in root.iterdir()] == ["geography.sqlite"]
