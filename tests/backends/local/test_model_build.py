"""``model.init``'s build at ``model.path``: whole or not at all, and once when runs start together."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from filelock import FileLock

from rlfcore import tinymodel
from rlfcore.backends.local.model import ensure_model
from rlfcore.schema import RunConfig

TINY = {"vocab_size": 280, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1}


def config(tmp_path: Path) -> RunConfig:
    (tmp_path / "texts.jsonl").write_text('{"prompt": "What is 2 plus 3?", "answer": "5"}\n' * 5)
    return RunConfig.model_validate({"model": {"path": "model", "init": {"texts": ["texts.jsonl"], **TINY}}})


def test_a_failed_build_leaves_no_file_and_the_next_run_builds_it_whole(tmp_path, monkeypatch):
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("interrupted")

    monkeypatch.setattr(tinymodel, "build_model", broken)  # after the tokenizer is written
    with pytest.raises(RuntimeError, match="interrupted"):
        ensure_model(config(tmp_path), tmp_path)
    assert not (tmp_path / "model").exists()
    assert [f.name for f in tmp_path.iterdir() if "partial" in f.name] == []
    monkeypatch.undo()
    path = ensure_model(config(tmp_path), tmp_path)
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()


def test_a_run_that_starts_during_a_build_waits_for_it_and_builds_nothing(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    build, builds = tinymodel.build_tiny, []
    monkeypatch.setattr(tinymodel, "build_tiny", lambda *a, **k: builds.append(a))
    done: list[Path] = []
    with FileLock(model / ".rlf-build.lock"):  # another process is building
        waiter = threading.Thread(target=lambda: done.append(ensure_model(config(tmp_path), tmp_path)))
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not done
        build(["What is 2 plus 3? 5"] * 5, model, **TINY)  # that build ends
    waiter.join(timeout=30)
    assert done == [model] and builds == []
