"""One validation pass (issue 33, item 5): a config with several mistakes gets every one that can be
found without starting the run, at once, from ``rlf config``, ``rlf eval`` and ``rlf train`` alike, in
the same words and with exit code 2, before anything is printed or written. The schema comes first;
the checks it leaves possible follow (environments, trackers, files, the model), skipping only what
reads a section the schema refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlfcore.config import Command, ConfigError, validate
from tests.support.rlf import run_rlf

BAD = """\
plugins: [calculater]
envs:
  math: [calculator]
model:
  path: nomodel
data:
  train: missing.jsonl
trainer:
  loggers: [wandb]
rollout:
  n: 0
  max_turn: 3
"""

PROBLEMS = [
    "plugins[0]: no plugin named 'calculater' is installed",
    "rollout.n: Input should be greater than or equal to 1 (got 0)",
    "rollout.max_turn: unknown key (value 3); did you mean 'max_turns'?",
    "envs.math[0]: plugin 'calculator' is not enabled",
    "trainer.loggers[0]: tracker 'wandb' needs the wandb package, which is not installed",
    "data.train: no such file: {root}/missing.jsonl (read relative to the config's folder)",
]
MODEL = (
    "model.path: no folder {root}/nomodel ('nomodel', read relative to the config's folder (one typed on the "
    "command line is not)), and no model.init to build one there"
)


def _lines(stderr: str) -> list[str]:
    return [line.strip() for line in stderr.splitlines()]


def test_a_config_with_many_mistakes_gets_them_all_at_once_from_config_eval_and_train(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['wandb'] = None\n")  # as if not installed
    project = tmp_path / "project"
    project.mkdir()
    (project / "bad.yaml").write_text(BAD)
    problems = [p.format(root=project) for p in PROBLEMS]
    model = MODEL.format(root=project)

    runs = {command: run_rlf(command, "bad.yaml", site=site, cwd=project) for command in ("config", "eval", "train")}
    for command, out in runs.items():
        assert out.returncode == 2, (command, out.stdout + out.stderr)
        assert out.stdout == "", (command, out.stdout)  # no "Run folder: ...", no resolved config
        lines = _lines(out.stderr)
        for problem in problems:
            assert any(line.startswith(problem) for line in lines), (command, problem, out.stderr)
        assert "DataError" not in out.stderr and "Traceback" not in out.stderr
    # rlf eval and rlf train need the model: an error in the list; rlf config cannot tell a local run
    # from a verl one (which downloads a hub model), so it warns, in the same words, before the list
    train = _lines(runs["train"].stderr)
    assert _lines(runs["eval"].stderr) == train
    assert train[0] == "bad.yaml: 7 errors" and train[-1] == model
    assert _lines(runs["config"].stderr) == [f"warning: {model}", "bad.yaml: 6 errors", *train[1:-1]]
    assert sorted(p.name for p in project.iterdir()) == ["bad.yaml"]  # no runs/ folder, no eval output


def _config(root: Path, text: str) -> Path:
    (root / "rows.jsonl").write_text(json.dumps({"id": "q", "prompt": "Hi."}) + "\n")
    (root / "run.yaml").write_text(text)
    return root / "run.yaml"


def _issues(config: Path, command: Command = "train", overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        validate(config, overrides, command)
    return [f"{i.path}: {i.message}" for i in caught.value.issues]


def test_a_section_the_schema_refuses_skips_only_its_own_checks(tmp_path: Path) -> None:
    config = _config(tmp_path, "model: {path: nomodel}\ndata: {train: gone.jsonl}\nsft: {data: gone.jsonl, steps: 2}\n")
    # the data section is refused: its file is not looked at, since its settings may be the mistake;
    # the sft section's file and the model still are
    issues = _issues(config, overrides=["data.bogus=1"])
    assert [i.split(":")[0] for i in issues] == ["data.bogus", "sft.data", "model.path"]
    # a refused model section skips the model's check, not the data's
    issues = _issues(config, overrides=["model.dtype=float8"])
    assert [i.split(":")[0] for i in issues] == ["model.dtype", "data.train", "sft.data"]


def test_each_command_checks_the_files_and_model_it_reads(tmp_path: Path) -> None:
    config = _config(tmp_path, "model: {path: nomodel}\ndata: {eval: rows.jsonl}\nsft: {data: gone.jsonl}\n")
    # rlf train needs data.train, reads sft.data only with sft.steps, and the model's weights
    assert [i.split(":")[0] for i in _issues(config)] == ["data.train", "model.path"]
    assert _issues(config)[0] == "data.train: not set: rlf train reads it"
    assert [i.split(":")[0] for i in _issues(config, overrides=["sft.steps=3"])] == [
        "data.train",
        "sft.data",
        "model.path",
    ]
    # rlf sft needs sft.data; rlf eval reads data.eval, and a chat engine needs no model
    assert [i.split(":")[0] for i in _issues(config, "sft")] == ["sft.data", "model.path"]
    assert [i.split(":")[0] for i in _issues(config, "eval")] == ["model.path"]
    validate(config, ["engine.name=openai-chat", "engine.base_url=http://localhost:1/v1"], "eval")
    assert _issues(config, "eval", ["data.eval=null"])[0] == (
        "data.eval: not set: rlf eval reads its rows from data.eval (or data.train)"
    )
    # training with a chat engine is refused in the same pass as the rest
    assert "engine.name" in [i.split(":")[0] for i in _issues(config, overrides=["engine.name=openai-chat"])]
    # rlf config reports a missing model as a warning, in the words train and eval use
    warned: list[str] = []
    validate(config, ["sft.data=rows.jsonl"], "config", warn=lambda i: warned.append(f"{i.path}: {i.message}"))
    assert warned == [_issues(config, "eval")[0]] == [_issues(config, overrides=["data.train=rows.jsonl"])[0]]


def test_an_agent_with_a_chat_engine_is_refused_where_it_would_never_run(tmp_path: Path) -> None:
    """A chat engine evaluates another API with rlf's own message loop; an ``agent`` beside it would be
    ignored without a word, so the pair is an error in every command."""
    (tmp_path / "agent.py").write_text("async def run(task, client):\n    return 'x'\n")
    config = _config(tmp_path, "model: {path: nomodel}\ndata: {eval: rows.jsonl}\nagent: {entry: agent.py:run}\n")
    chat = ["engine.name=openai-chat", "engine.base_url=http://localhost:1/v1"]
    for command in ("eval", "config"):
        [issue] = _issues(config, command, chat)
        assert issue.startswith("agent: an agent talks to rlf's endpoint") and "engine.name transformers" in issue
    validate(config, ["agent=null", *chat], "eval")  # without the agent, the chat API is evaluated


@pytest.mark.slow
def test_rlf_eval_counts_template_mismatches_in_its_summary(tmp_path: Path) -> None:
    """docs/models.md: ``rlf eval`` counts the trajectories whose tokens differ from a full rendering; a
    randomly initialised model writes tokens its tokenizer would not, so some do."""
    from rlfcore.tinymodel import build_tiny

    build_tiny(["What is 2 plus 3? The answer is 5."] * 10, tmp_path / "model", vocab_size=280)
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus 3?", "ground_truth": str(i + 3)} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text(
        "model: {path: model}\ndata: {eval: rows.jsonl}\nengine: {device: cpu}\n"
        "rollout: {n: 2, check_template: true, sampling: {max_tokens: 12, seed: 3}}\n"
    )
    out = run_rlf("eval", "run.yaml", "--out", "out.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    mismatched = sum(1 for x in lines if x["template_mismatch"])
    assert mismatched > 0, "the random model should write some tokens a full rendering does not"
    shown = re.search(r"template mismatches\s*│\s*(\d+)", out.stdout)
    assert shown is not None, out.stdout
    assert int(shown.group(1)) == mismatched
    unchecked = run_rlf("eval", "run.yaml", "rollout.check_template=false", "--out", "off.jsonl", cwd=tmp_path)
    assert unchecked.returncode == 0 and "template mismatches" not in unchecked.stdout  # no count of a check not made
