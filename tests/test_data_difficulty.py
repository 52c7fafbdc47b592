"""``data.difficulty``: training rows dropped by the solve rates of an ``rlf eval --repeats`` file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.config import ConfigError, load_config
from rlfcore.data import DataError, normalize_row, read_difficulty, select_by_difficulty, training_rows
from tests.support.rlf import run_rlf

RATES = {"r0": 0.0, "r1": 0.25, "r2": 0.5, "r3": 0.9, "r4": 1.0}


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _rows(n: int = 6) -> list:
    return [normalize_row({"id": f"r{i}", "prompt": f"q{i}"}) for i in range(n)]


def test_thresholds_drop_the_rows_solved_always_or_never_and_keep_unprofiled_ones():
    ids = [r.id for r in select_by_difficulty(_rows(), RATES, at_least=1.0, at_most=0.0)]
    assert ids == ["r1", "r2", "r3", "r5"]  # r5 is not in the file: kept
    assert [r.id for r in select_by_difficulty(_rows(), RATES, at_least=0.9, at_most=None)] == ["r0", "r1", "r2", "r5"]
    assert [r.id for r in select_by_difficulty(_rows(), RATES, at_least=None, at_most=0.25)] == [
        "r2",
        "r3",
        "r4",
        "r5",
    ]


def test_a_file_naming_rows_not_in_the_data_or_dropping_every_row_is_refused():
    with pytest.raises(DataError, match=r"names 2 row\(s\) not in the training data \('r4', 'r5'\)"):
        select_by_difficulty(_rows(4), {**RATES, "r5": 0.5}, at_least=1.0, at_most=None)
    with pytest.raises(DataError, match="every training row is dropped"):
        select_by_difficulty(_rows(2), {"r0": 1.0, "r1": 1.0}, at_least=1.0, at_most=None)


def test_reading_a_difficulty_file_names_its_mistakes(tmp_path: Path):
    good = _write(tmp_path / "d.jsonl", [{"id": k, "samples": 4, "solve_rate": v} for k, v in RATES.items()])
    assert read_difficulty(good) == RATES
    with pytest.raises(DataError, match="no such difficulty file: .*missing.jsonl.*rlf eval --repeats"):
        read_difficulty(tmp_path / "missing.jsonl")
    bad = _write(tmp_path / "bad.jsonl", [{"id": "a", "solve_rate": 0.5}, {"id": "b", "solve_rate": 2}])
    with pytest.raises(DataError, match=r"bad.jsonl:2: 'solve_rate' must be a number from 0 to 1"):
        read_difficulty(bad)
    dup = _write(tmp_path / "dup.jsonl", [{"id": "a", "solve_rate": 0.5}, {"id": "a", "solve_rate": 0.5}])
    with pytest.raises(DataError, match=r"dup.jsonl:2: duplicate id 'a'"):
        read_difficulty(dup)
    with pytest.raises(DataError, match="an object with an 'id'"):
        read_difficulty(_write(tmp_path / "noid.jsonl", [{"solve_rate": 0.5}]))


def test_the_config_reads_the_file_relative_to_itself_and_checks_the_thresholds(tmp_path: Path):
    _write(tmp_path / "prof.jsonl", [{"id": k, "solve_rate": v} for k, v in RATES.items()])
    (tmp_path / "run.yaml").write_text(
        "data: {difficulty: prof.jsonl, drop_solved_at_least: 1.0, drop_solved_at_most: 0}\n"
    )
    config, _ = load_config(tmp_path / "run.yaml")
    assert [r.id for r in training_rows(_rows(), config)] == ["r1", "r2", "r3", "r5"]
    plain, _ = load_config({})
    assert training_rows(_rows(), plain) == _rows()
    for data, why in [
        ({"drop_solved_at_least": 0.9}, "need data.difficulty"),
        ({"difficulty": "prof.jsonl"}, "drops nothing"),
        ({"difficulty": "prof.jsonl", "drop_solved_at_least": 0.5, "drop_solved_at_most": 0.5}, "must be below"),
        ({"difficulty": "prof.jsonl", "drop_solved_at_least": 1.5}, "less than or equal to 1"),
    ]:
        with pytest.raises(ConfigError, match=why):
            load_config({"data": data})


PLUGIN = """
from rlfcore import hookimpl


@hookimpl
def compute_score(sample):
    return float(sample.response.startswith("A"))
"""


def test_training_rolls_out_only_the_rows_the_difficulty_file_keeps(tmp_path: Path):
    (tmp_path / "plugin.py").write_text(PLUGIN)
    _write(tmp_path / "rows.jsonl", [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(6)])
    _write(tmp_path / "prof.jsonl", [{"id": k, "solve_rate": v} for k, v in RATES.items()])
    (tmp_path / "run.yaml").write_text(
        """
local_plugins: [plugin.py]
model:
  path: model
  init: {texts: [rows.jsonl], vocab_size: 280, hidden_size: 16, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 32}
data: {train: rows.jsonl, difficulty: prof.jsonl, drop_solved_at_least: 0.9, drop_solved_at_most: 0.0}
rollout: {n: 2, max_turns: 1, sampling: {max_tokens: 3}}
trainer: {steps: 2, prompts_per_step: 3, checkpoint_every: 2, samples_per_step: 6}
engine: {device: cpu}
"""
    )
    out = run_rlf("train", "run.yaml", "--run-dir", "run", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = {
        json.loads(x)["row_id"] for f in (tmp_path / "run" / "samples").iterdir() for x in f.read_text().splitlines()
    }
    assert seen == {"r1", "r2", "r5"}  # 2 steps of 3 prompts: one epoch of the kept rows, none of the dropped

    _write(tmp_path / "prof.jsonl", [{"id": "other", "solve_rate": 0.5}])
    refused = run_rlf("train", "run.yaml", "--run-dir", "run2", cwd=tmp_path)
    assert refused.returncode != 0 and "names 1 row(s) not in the training data ('other')" in refused.stderr
