"""The plugin through rlf's real loop and reward pipeline, with a scripted policy on the shop database."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
from rlf_nl2sql.shop import build_database, shop_db, shop_sql
from rlf_nl2sql.verify import Verifier

from rlfcore import hookimpl, tool
from rlfcore.testing import check_plugin, rollout

CONFIG = {"plugins": ["nl2sql"]}


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def fenced(sql: str) -> str:
    return f"```sql\n{sql}\n```"


def row(row_id: str, db: Path | str | None, gold: str | None = "SELECT COUNT(*) FROM customers", **extra) -> dict:
    out = {"id": row_id, "prompt": "How many customers are there?", "ground_truth": gold, "extra": {**extra}}
    if db is not None:
        out["extra"]["db"] = str(db)
    return out


def tool_messages(traj) -> list[str]:
    return [m["content"] for m in traj.messages if m["role"] == "tool"]


@pytest.fixture(scope="module")
def two_dbs(tmp_path_factory) -> tuple[Path, Path]:
    """The shop, and a shop with a ninth customer: the same query answers differently."""
    root = tmp_path_factory.mktemp("dbs")
    a = build_database(shop_sql(), root / "a.sqlite")
    b = build_database(
        shop_sql() + "\nINSERT INTO customers VALUES (9, 'Kathleen Booth', 'London', '2024-03-01');", root / "b.sqlite"
    )
    return a, b


def test_plugin_passes_the_conformance_check():
    report = check_plugin("nl2sql")
    assert report.ok, report.render()
    assert any("smoke rollout shop-london:" in f"{i.name}:" and "reward 1" in i.detail for i in report.items), (
        report.render()
    )


def test_the_model_explores_then_earns_the_reward_for_a_right_answer():
    db = shop_db()
    gold = "SELECT name FROM customers WHERE city = 'London'"
    script = {
        "right": [
            call("sql", query="SELECT name, city FROM customers ORDER BY id LIMIT 2"),
            fenced("SELECT name FROM customers WHERE city = 'London'"),
        ],
        "reordered": [fenced("SELECT name FROM customers WHERE city IN ('London') ORDER BY name DESC")],
        "wrong": [fenced("SELECT name FROM customers WHERE city = 'Boston'")],
        "broken": [fenced("SELECT nme FROM customers")],
        "silent": ["I am not sure."],
    }
    rows = [{**row(k, db, gold), "prompt": "Who lives in London?"} for k in script]
    trajs = {t.row_id: t for t in rollout(CONFIG, rows, script)}
    assert tool_messages(trajs["right"]) == ["name | city\nAda Lovelace | London\nAlan Turing | Manchester\n(2 rows)"]
    assert trajs["right"].reward == 1.0 and trajs["right"].reward_components["execution"] == 1.0
    assert trajs["reordered"].reward == 1.0  # the gold does not order, so neither must the answer
    for k in ("wrong", "broken", "silent"):
        assert trajs[k].reward == 0.0 and trajs[k].reward_error is None, k
    assert trajs["silent"].reward_components["format"] == 0.0


def test_each_sample_uses_its_own_database_even_with_the_result_cache(two_dbs):
    a, b = two_dbs
    count = call("sql", query="SELECT COUNT(*) FROM customers")
    script = {"a": [count, fenced("SELECT 8")], "b": [count, fenced("SELECT 8")]}
    config = {**CONFIG, "tools": {"cache": True}}
    trajs = {t.row_id: t for t in rollout(config, [row("a", a), row("b", b)], script)}
    assert tool_messages(trajs["a"]) == ["COUNT(*)\n8\n(1 row)"]
    assert tool_messages(trajs["b"]) == ["COUNT(*)\n9\n(1 row)"]
    assert (trajs["a"].reward, trajs["b"].reward) == (1.0, 0.0)


def test_database_paths_are_relative_to_db_root_relative_to_the_config(tmp_path):
    (tmp_path / "dbs").mkdir()
    build_database(shop_sql(), tmp_path / "dbs" / "shop.sqlite")
    (tmp_path / "run.yaml").write_text("plugins: [nl2sql]\nnl2sql:\n  db_root: dbs\n")
    script = {"q": [call("sql", query="SELECT COUNT(*) FROM products"), fenced("SELECT COUNT(*) FROM customers")]}
    [t] = rollout(tmp_path / "run.yaml", [row("q", "shop.sqlite")], script)
    assert tool_messages(t) == ["COUNT(*)\n11\n(1 row)"] and t.reward == 1.0


def test_a_database_outside_db_root_is_refused_when_confined(tmp_path):
    (tmp_path / "data" / "dbs").mkdir(parents=True)
    build_database(shop_sql(), tmp_path / "data" / "dbs" / "shop.sqlite")
    outside = build_database(shop_sql(), tmp_path / "private.sqlite")
    script = {
        i: [call("sql", query="SELECT COUNT(*) FROM products"), fenced("SELECT COUNT(*) FROM customers")]
        for i in ("inside", "dotdot", "absolute")
    }
    rows = [row("inside", "shop.sqlite"), row("dotdot", "../../private.sqlite"), row("absolute", str(outside))]
    (tmp_path / "data" / "open.yaml").write_text("plugins: [nl2sql]\nnl2sql:\n  db_root: dbs\n")
    trusted = {t.row_id: t for t in rollout(tmp_path / "data" / "open.yaml", rows, script)}
    assert all(t.reward == 1.0 for t in trusted.values())  # by default a row may name any file
    (tmp_path / "data" / "confined.yaml").write_text(
        "plugins: [nl2sql]\nnl2sql:\n  db_root: dbs\n  confine_to_db_root: true\n"
    )
    confined = {t.row_id: t for t in rollout(tmp_path / "data" / "confined.yaml", rows, script)}
    assert confined["inside"].reward == 1.0 and confined["inside"].tool_errors == 0
    for name in ("dotdot", "absolute"):
        t = confined[name]
        assert t.tool_errors == 1 and "outside nl2sql.db_root" in tool_messages(t)[0], tool_messages(t)
        assert t.reward == 0.0 and "outside nl2sql.db_root" in (t.reward_error or "")


def test_a_row_without_a_database_gets_error_results_and_a_reward_error():
    [t] = rollout(CONFIG, [row("q", None)], {"q": [call("sql", query="SELECT 1"), fenced("SELECT 8")]})
    assert t.tool_errors == 1 and "names no database" in tool_messages(t)[0]
    assert t.reward == 0.0 and "names no database" in (t.reward_error or "")


def test_destructive_calls_are_tool_errors_and_leave_the_file_alone(two_dbs):
    a, _ = two_dbs
    before = hashlib.sha256(a.read_bytes()).hexdigest()
    statements = [
        "DROP TABLE customers",
        "DELETE FROM orders",
        "ATTACH DATABASE 'x.db' AS x",
        "PRAGMA writable_schema = 1",
    ]
    script = {"q": ["\n".join(call("sql", query=s) for s in statements), fenced("SELECT COUNT(*) FROM customers")]}
    # the byte tokenizer makes each byte a token: room for four calls and their errors
    config = {
        **CONFIG,
        "rollout": {"max_response_tokens": 4096, "max_total_tokens": 8192, "sampling": {"max_tokens": 1024}},
    }
    [t] = rollout(config, [row("q", a)], script)
    assert t.tool_calls == 4 and t.tool_errors == 4 and t.tool_error_kinds == {"exception": 4}
    assert all("not allowed" in m for m in tool_messages(t)), tool_messages(t)
    assert hashlib.sha256(a.read_bytes()).hexdigest() == before
    assert t.reward == 1.0


def test_format_weight_blends_execution_and_format():
    db = shop_db()
    config = {**CONFIG, "nl2sql": {"format_weight": 0.2}}
    script = {
        "fenced": [fenced("SELECT COUNT(*) FROM customers")],
        "plain": ["SELECT COUNT(*) FROM customers"],
        "fenced-wrong": [fenced("SELECT 7")],
    }
    trajs = {t.row_id: t for t in rollout(config, [row(k, db) for k in script], script)}
    assert trajs["fenced"].reward == pytest.approx(1.0)
    assert trajs["plain"].reward == pytest.approx(0.8) and trajs["plain"].reward_components["format"] == 0.0
    assert trajs["fenced-wrong"].reward == pytest.approx(0.2)


def test_schema_tool_is_offered_when_configured():
    config = {**CONFIG, "nl2sql": {"schema_tool": True}}
    script = {"q": [call("schema") + call("schema", table="orders") + call("schema", table="nope"), fenced("SELECT 8")]}
    [t] = rollout(config, [row("q", shop_db())], script)
    everything, orders, missing = tool_messages(t)
    assert everything.count("CREATE TABLE") == 4
    assert orders.startswith("CREATE TABLE orders") and "customers (" not in orders
    assert "no table named 'nope'" in missing and "customers" in missing


def test_a_broken_gold_query_is_a_reward_error_not_a_zero_for_the_model():
    [t] = rollout(CONFIG, [row("q", shop_db(), gold="SELECT missing FROM customers")], {"q": [fenced("SELECT 8")]})
    assert t.reward == 0.0 and "gold SQL failed: no such column: missing" in (t.reward_error or "")


def test_thread_and_process_pools_agree(two_dbs):
    a, b = two_dbs
    gold = "SELECT COUNT(*) FROM customers"
    items = [
        (a, gold, fenced("SELECT 8")),
        (b, gold, fenced("SELECT 8")),
        (a, gold, "no sql"),
        (b, gold, fenced("SELECT 9;")),
    ]
    verdicts = []
    for pool in ("thread", "process"):
        verifier = Verifier(workers=2, pool=pool)
        try:
            many = [v.passed for v in verifier.verify_many(items)]

            async def gathered(verifier: Verifier = verifier) -> list[bool]:
                return [v.passed for v in await asyncio.gather(*(verifier.verify_async(*i) for i in items))]

            assert asyncio.run(gathered()) == many
            verdicts.append(many)
        finally:
            verifier.close()
    assert verdicts == [[True, False, False, True]] * 2


class Clock:
    """Another plugin sharing the environment, listed first: the contexts then carry its (empty) settings."""

    @hookimpl
    def register_tools(self, ctx):
        @tool
        def now() -> str:
            """The time."""
            return "noon"

        return [now]


def test_settings_are_found_when_another_plugin_leads_the_environment(tmp_path):
    (tmp_path / "dbs").mkdir()
    build_database(shop_sql(), tmp_path / "dbs" / "shop.sqlite")
    config = {
        "plugins": ["clock", "nl2sql"],
        "envs": {"shop": ["clock", "nl2sql"]},
        "nl2sql": {"db_root": str(tmp_path / "dbs"), "format_weight": 0.5},
    }
    script = {
        "q": [call("now") + call("sql", query="SELECT COUNT(*) FROM customers"), "SELECT COUNT(*) FROM customers"]
    }
    [t] = rollout(config, [{**row("q", "shop.sqlite"), "env": "shop"}], script, plugins={"clock": Clock()})
    assert tool_messages(t) == ["noon", "COUNT(*)\n8\n(1 row)"]
    assert t.reward == pytest.approx(0.5)  # right, but not in a ```sql fence: nl2sql's own format_weight applies
