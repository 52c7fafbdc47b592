"""What a user sees while waiting or stuck: a missing pyarrow names the install that fixes it, and a dense
index build reports its encoding on stderr instead of printing nothing for minutes."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from rlf_deepsearch import dense as dense_module
from rlf_deepsearch.cli import cli
from rlf_deepsearch.prepare import PrepareError, prepare

tomllib = pytest.importorskip("tomllib")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@pytest.fixture
def no_pyarrow(monkeypatch):
    """pyarrow as an environment without it sees it: its import raises ImportError."""
    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("no_pyarrow")
def test_parquet_without_pyarrow_names_the_install(tmp_path):
    src = tmp_path / "qa.jsonl"
    src.write_text(json.dumps({"question": "capital of France", "answer": "Paris"}) + "\n")
    out = tmp_path / "train.parquet"
    with pytest.raises(PrepareError, match=r"pip install") as caught:
        prepare([src], out)
    assert str(out) in str(caught.value) and not out.exists()
    [extra] = re.findall(r"'rlf-deepsearch\[(\w+)\]'", str(caught.value))
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert "pyarrow" in {Requirement(r).name for r in extras[extra]}, (
        f"the [{extra}] extra the error names lacks pyarrow"
    )
    result = CliRunner().invoke(cli, ["prepare", str(src), "-o", str(out)])
    assert result.exit_code == 1 and "pip install 'rlf-deepsearch[parquet]'" in result.output


def test_progress_lines_are_throttled_but_the_first_and_last_always_show(capsys):
    quiet = dense_module.stderr_progress("build", every_s=3600)
    for done in (0, 5, 9, 10):
        quiet(done, 10)
    assert capsys.readouterr().err.splitlines() == [
        "build: encoded 0/10 passages (0%, 0 s)",
        "build: encoded 10/10 passages (100%, 0 s)",
    ]
    chatty = dense_module.stderr_progress("build", every_s=0)
    for done in (0, 5, 10):
        chatty(done, 10)
    assert [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()] == [
        "build: encoded 0/10 passages",
        "build: encoded 5/10 passages",
        "build: encoded 10/10 passages",
    ]


class FakeEncoder:
    """Stands in for a sentence-transformers model: a fixed vector per text, and a record of each call."""

    dim = 8

    def __init__(self) -> None:
        self.calls: list[int] = []

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(
        self, texts: list[str], batch_size: int, normalize_embeddings: bool, convert_to_numpy: bool
    ) -> np.ndarray:
        self.calls.append(len(texts))
        vectors = np.array([np.random.default_rng(len(t)).normal(size=self.dim) for t in texts], dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_encoding_reports_each_chunk():
    model, seen = FakeEncoder(), []
    texts = [f"passage {i}" for i in range(2500)]
    vectors = dense_module.encode_passages(model, texts, 64, lambda done, total: seen.append((done, total)))
    chunk = 64 * dense_module.CHUNK_BATCHES
    assert vectors.shape == (2500, FakeEncoder.dim)
    assert model.calls == [chunk, chunk, 2500 - 2 * chunk]
    assert seen == [(0, 2500), (chunk, 2500), (2 * chunk, 2500), (2500, 2500)]


def test_rlf_deepsearch_index_shows_its_progress(tmp_path, monkeypatch):
    pytest.importorskip("faiss", reason="dense retrieval needs the [dense] extra (faiss-cpu)")
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("dense retrieval needs the [dense] extra (sentence-transformers)")
    model = FakeEncoder()
    monkeypatch.setattr(dense_module, "load_encoder", lambda folder: model)
    monkeypatch.setattr(dense_module, "_describe", lambda name, folder: "a fake encoder")  # no torch import
    encoder = tmp_path / "encoder"  # a model folder by name; the fake stands in for what it holds
    encoder.mkdir()
    (encoder / "config.json").write_text("{}")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": str(i), "title": f"T{i}", "text": "x" * i}) + "\n" for i in range(1500))
    )
    args = ["index", "--corpus", str(corpus), "--index-dir", str(tmp_path / "cache"), "--retriever", "dense"]
    result = CliRunner().invoke(cli, [*args, "--encoder", str(encoder)])
    assert result.exit_code == 0, result.output
    label = "rlf-deepsearch: dense index of corpus.jsonl (flat)"
    assert f"{label}: encoded 0/1500 passages (0%" in result.stderr  # at once, before any encoding
    assert f"{label}: encoded 1500/1500 passages (100%" in result.stderr
    assert "1500 passages indexed (dense)" in result.stderr and len(model.calls) == 2
