"""The preparation command: Spider, BIRD and GeoQuery files become rlf rows the plugin scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rlf_nl2sql.shop import build_database, shop_questions, shop_sql

from rlfcore.testing import rollout

SCRIPT = Path(sys.executable).parent / "rlf-nl2sql"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The console script the plugin's pyproject declares, as a user runs it."""
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: install the plugin (pip install -e plugins/rlf-nl2sql)"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def spider(tmp_path: Path) -> Path:
    """Spider's layout: ``dev.json`` and ``database/<db_id>/<db_id>.sqlite``."""
    build_database(shop_sql(), tmp_path / "database" / "shop" / "shop.sqlite")
    records = [{**q, "query_toks": q["query"].split(), "sql": {"select": [False, []]}} for q in shop_questions()]
    (tmp_path / "dev.json").write_text(json.dumps(records))
    return tmp_path


def test_spider_files_become_rows_that_score_one_with_their_gold(spider):
    out = run("prepare", "dev.json", "--db-dir", "database", "--out", "rows.jsonl", cwd=spider)
    assert out.returncode == 0, out.stderr
    rows = read_rows(spider / "rows.jsonl")
    questions = shop_questions()
    assert len(rows) == len(questions) == 21
    first = rows[0]
    assert first["id"] == "dev-00000" and first["env"] == "nl2sql"
    assert first["ground_truth"] == questions[0]["query"]
    assert first["extra"] == {
        "db": "shop/shop.sqlite",
        "question": questions[0]["question"],
    }  # no token lists, no parsed SQL
    prompt = first["prompt"]
    assert "CREATE TABLE customers" in prompt and "Question: How many customers are there?" in prompt
    assert prompt.endswith("in a ```sql code block.")
    script = {r["id"]: [f"```sql\n{r['ground_truth']}\n```"] for r in rows}
    config = {
        "plugins": ["nl2sql"],
        "nl2sql": {"db_root": str(spider / "database")},
        "rollout": {"max_total_tokens": 8192},
    }
    assert [t.reward for t in rollout(config, rows, script)] == [1.0] * 21


def test_bird_fields_and_the_options(spider):
    records = [
        {
            "question_id": 7,
            "question": "Average furniture price?",
            "evidence": "furniture is a category",
            "SQL": "SELECT AVG(price) FROM products WHERE category = 'furniture'",
            "db_id": "shop",
            "difficulty": "simple",
        },
        {
            "question_id": 8,
            "question": "Broken?",
            "SQL": "SELECT missing FROM nowhere",
            "db_id": "shop",
            "difficulty": "hard",
        },
        {
            "question_id": 9,
            "question": "Customers?",
            "SQL": "SELECT COUNT(*) FROM customers",
            "db_id": "shop",
            "difficulty": "hard",
        },
    ]
    (spider / "bird.json").write_text(json.dumps(records))
    out = run(
        "prepare",
        "bird.json",
        "--db-dir",
        "database",
        "--out",
        "bird.jsonl",
        "--check",
        "--schema",
        "tool",
        "--answer-format",
        "answer_tag",
        cwd=spider,
    )
    assert out.returncode == 0, out.stderr
    assert "left out 1" in out.stdout and "8: no such table: nowhere" in out.stdout
    rows = read_rows(spider / "bird.jsonl")
    assert [r["id"] for r in rows] == ["7", "9"]
    assert rows[0]["extra"] == {
        "db": "shop/shop.sqlite",
        "question": "Average furniture price?",
        "difficulty": "simple",
    }
    assert "Hint: furniture is a category" in rows[0]["prompt"] and "CREATE TABLE" not in rows[0]["prompt"]
    assert "`schema` tool" in rows[0]["prompt"] and rows[0]["prompt"].endswith("inside <answer></answer> tags.")
    out = run(
        "prepare",
        "bird.json",
        "--db-dir",
        "database",
        "--out",
        "hard.jsonl",
        "--where",
        "difficulty=hard",
        "--limit",
        "1",
        cwd=spider,
    )
    assert out.returncode == 0 and [r["id"] for r in read_rows(spider / "hard.jsonl")] == ["8"]


def test_mistakes_are_named(spider):
    (spider / "bad.json").write_text(json.dumps([{"question": "q", "query": "SELECT 1", "db_id": "gone"}]))
    out = run("prepare", "bad.json", "--out", "x.jsonl", cwd=spider)
    assert out.returncode == 1 and "record 0" in out.stderr and "gone/gone.sqlite" in out.stderr
    (spider / "bad.json").write_text(json.dumps([{"query": "SELECT 1", "db_id": "shop"}]))
    out = run("prepare", "bad.json", "--db-dir", "database", "--out", "x.jsonl", cwd=spider)
    assert out.returncode == 1 and "'question'" in out.stderr
    out = run("prepare", "dev.json", "--out", "x.jsonl", "--where", "nokey", cwd=spider)
    assert out.returncode == 1 and "FIELD=VALUE" in out.stderr


def test_geoquery_converts_with_its_own_split(shared_data, tmp_path):
    source = shared_data / "nl2sql" / "geoquery" / "geoquery.jsonl"
    out = run("prepare", str(source), "--out", "test.jsonl", "--where", "question_split=test", "--check", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = read_rows(tmp_path / "test.jsonl")
    assert len(rows) == 277 and "left out" not in out.stdout
    assert all(r["extra"]["db"] == "geography.sqlite" and r["extra"]["question_split"] == "test" for r in rows)
    assert rows[0]["id"].startswith("geoquery-") and 'CREATE TABLE "city"' in rows[0]["prompt"]


def test_demo_writes_a_database_rows_and_a_config(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rlf_nl2sql", "demo", str(tmp_path / "shop")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = read_rows(tmp_path / "shop" / "shop.jsonl")
    assert len(rows) == 21 and rows[0]["extra"]["db"] == "shop.sqlite"
    script = {r["id"]: [f"```sql\n{r['ground_truth']}\n```"] for r in rows[:3]}
    trajs = rollout(tmp_path / "shop" / "shop.yaml", rows[:3], script)
    assert [t.reward for t in trajs] == [1.0] * 3
