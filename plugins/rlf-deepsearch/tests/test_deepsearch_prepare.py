"""``rlf-deepsearch prepare``: NQ-open and HotpotQA files to rlf rows that rlf reads as they are."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rlf_deepsearch.cli import cli
from rlf_deepsearch.prepare import INSTRUCTIONS, PrepareError, prepare, to_row

from rlfcore.testing import read_rows


def test_nq_open_rows(shared_data, tmp_path):
    out = tmp_path / "nq.jsonl"
    assert prepare([shared_data / "qa/nq_open/NQ-open.dev.jsonl"], out) == 3610
    rows = read_rows(out)  # the core's own reader accepts them
    first = rows[0]
    assert first.id == "NQ-open.dev-000000" and first.env == "deepsearch"
    assert first.ground_truth == ["14 December 1972 UTC", "December 1972"]
    assert first.prompt == [
        {
            "role": "user",
            "content": INSTRUCTIONS["hermes"].format(question="when was the last time anyone was on the moon"),
        }
    ]
    assert first.extra == {"question": "when was the last time anyone was on the moon"}


def test_hotpotqa_rows_keep_ids_and_supporting_paragraphs(shared_data, tmp_path):
    out = tmp_path / "hp.jsonl"
    result = CliRunner().invoke(
        cli,
        [
            "prepare",
            str(shared_data / "qa/hotpotqa/questions.jsonl"),
            "-o",
            str(out),
            "--format",
            "search-r1",
            "--limit",
            "5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote 5 rows" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["id"] == "5a8c7595554299585d9e36b6" and rows[0]["ground_truth"] == ["Chief of Protocol"]
    assert rows[0]["extra"]["supporting_ids"] == ["hp03838", "hp02432"]
    assert "<search> query </search>" in rows[0]["prompt"] and rows[0]["prompt"].rstrip().endswith("Kiss and Tell?")


@pytest.mark.parametrize(
    "record, message",
    [
        ({"answer": ["x"]}, "no 'question' string"),
        ({"question": "q"}, "no gold answers: expected one of answer, answers, golden_answers"),
        ({"question": "q", "answers": ["", " "]}, "holds no non-empty answer"),
        (["q"], "expected an object"),
    ],
)
def test_bad_records_are_named(record, message):
    with pytest.raises(PrepareError, match=message):
        to_row(record, "in.jsonl:3", "r")


def test_flashrag_answers_and_duplicate_ids(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "a", "question": "q?", "golden_answers": "one"})
        + "\n"
        + json.dumps({"id": "a", "question": "r?", "answer": "two"})
        + "\n"
    )
    with pytest.raises(PrepareError, match=r"in.jsonl:2: duplicate id 'a'"):
        prepare([src], tmp_path / "out.jsonl")
    result = CliRunner().invoke(cli, ["prepare", str(src), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1 and "duplicate id 'a'" in result.output


def test_search_r1_parquet_layout_from_nq_and_hotpotqa(shared_data, tmp_path):
    """Search-R1's nq_hotpotqa training file: NQ and HotpotQA rows in one parquet, in the columns its
    scripts/data_process/nq_search.py writes, read back by rlf as they are."""
    import pyarrow.parquet as pq
    from rlf_deepsearch.answers import gold_answers

    out = tmp_path / "train.parquet"
    nq, hp = shared_data / "qa/nq_open/NQ-open.dev.jsonl", shared_data / "qa/hotpotqa/questions.jsonl"
    result = CliRunner().invoke(cli, ["prepare", str(nq), str(hp), "-o", str(out), "--split", "test"])
    assert result.exit_code == 0, result.output
    assert "wrote 3860 rows" in result.output
    table = pq.read_table(out).to_pylist()
    assert {k for k in table[0]} == {
        "id",
        "question",
        "golden_answers",
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
        "env",
    }
    first, last = table[0], table[-1]
    assert first["data_source"] == "nq" and last["data_source"] == "hotpotqa"
    assert first["question"] == "when was the last time anyone was on the moon?"
    assert first["prompt"] == [
        {"role": "user", "content": INSTRUCTIONS["search-r1"].format(question=first["question"])}
    ]
    assert first["prompt"][0]["content"].endswith("Question: when was the last time anyone was on the moon?\n")
    assert first["ability"] == "fact-reasoning"
    assert first["reward_model"] == {
        "style": "rule",
        "ground_truth": {"target": ["14 December 1972 UTC", "December 1972"]},
    }
    assert first["extra_info"]["split"] == "test" and [r["extra_info"]["index"] for r in table[:3]] == [0, 1, 2]
    assert last["extra_info"]["supporting_ids"] and len({r["id"] for r in table}) == 3860
    rows = read_rows(out)  # rlf reads Search-R1's file unchanged and routes it to this plugin
    assert rows[0].env == "deepsearch" and gold_answers(rows[0].ground_truth) == [
        "14 December 1972 UTC",
        "December 1972",
    ]
    assert rows[-1].prompt[0]["content"] == last["prompt"][0]["content"]
