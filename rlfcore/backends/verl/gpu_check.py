"""verl's real GRPO trainer end to end on a tiny model: the GPU check, and the flow the CPU test runs.

    python -m rlfcore.backends.verl.gpu_check [WORKDIR] [--gpus N] [-- raw verl overrides]

``rlf train --backend verl`` runs rlf's SFT warm start (a short one, on demonstrations of calling
the calculator), then 2 GRPO steps with the ``rlf_agent`` loop, a real MCP tool (rlf-mcp's bundled
calculator server) and rlf's reward pipeline, saving a checkpoint each step; then ``--resume`` runs a
3rd step from that checkpoint. Then verl's own outputs are checked: its metrics (rewards, a non-zero
gradient, the rollout weight versions, in ``RUN/verl_metrics.jsonl`` where ``rlf ui`` reads them),
its rollout dumps and its checkpoint files, rlf's own per-sample records beside the dumps (most
samples call the calculator, and the real MCP server answers), and the ``summary.json`` that marks
the run finished. The warm-started model is still nearly random at arithmetic, so its reward is a
graded one (how close its number is to the answer) that varies within a group and gives GRPO a gradient. Prints a JSON summary as the last line;
exit code 0 only when both runs finished and every check passed. Needs ``rlfcore[verl]`` and
rlf-mcp installed (the entry point must be in the environment) and vLLM.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

REWARD_PLUGIN = '''
"""How close the answer's number is to the right one (1 when right), else a tenth of its share of
digits: graded, so a nearly random model's samples differ and GRPO gets a gradient."""
from rlfcore import hookimpl


@hookimpl
def compute_score(sample, verification, ctx):
    text = (sample.response or "").strip()
    try:
        return 1.0 / (1.0 + abs(int(text) - int(sample.ground_truth)))
    except ValueError:
        return 0.1 * sum(c.isdigit() for c in text) / max(1, len(text))
'''

STEPS = 2
"""GRPO steps of the first run; the resumed run adds one."""

CONFIG = """plugins: [mcp]
local_plugins: [digits.py]
envs: {calc: [mcp, digits]}
seed: 0
model: {path: model}
data: {train: data.jsonl, default_env: calc}
rollout: {n: 2, max_turns: 2, max_total_tokens: 512, max_response_tokens: 64, sampling: {temperature: 1.0, max_tokens: 32}}
trainer: {steps: @STEPS@, prompts_per_step: 4, micro_batch_size: 8, lr: 3.0e-4, checkpoint_every: 1, samples_per_step: 2}
sft: {data: demos.jsonl, steps: 100, lr: 0.005, batch_size: 8}
tools: {timeout_s: 5}
""".replace("@STEPS@", str(STEPS))
"""Tiny batches and lengths: a step is cheap, yet has 4 groups of 2 and room for a call, its result and
an answer. The warm start (100 steps of 8) is what it takes this model to call the calculator in most
samples with well-formed arguments."""

RAW = [
    "actor_rollout_ref.rollout.enforce_eager=true",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
]
"""verl overrides for one small GPU; the command line's come after them and win."""

CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 3"}}\n</tool_call>'


def demonstration(a: int, b: int) -> dict[str, Any]:
    """One warm-start conversation: the question, a call of the calculator, its result, the answer."""
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "calculate", "arguments": {"expression": f"{a} + {b}"}},
    }
    return {
        "messages": [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "name": "calculate", "content": str(a + b)},
            {"role": "assistant", "content": str(a + b)},
        ]
    }


def write_workdir(work: Path) -> Path:
    """The tiny model (head size 64: vLLM's CPU attention needs 32 or more), the graded reward, 32
    questions, 64 demonstrations for the warm start and the run config; returns the config path."""
    from rlfcore.tinymodel import build_tiny

    model = work / "model"
    if not (model / "config.json").exists():
        texts = ["What is 2 plus 3? The answer is 5.", CALL, "<tool_response>\n5\n</tool_response>"] * 40
        build_tiny(
            texts,
            model,
            vocab_size=512,
            hidden_size=128,
            num_heads=2,
            num_kv_heads=1,
            num_layers=4,
            intermediate_size=384,
            max_position_embeddings=1024,
        )
    (work / "digits.py").write_text(REWARD_PLUGIN)
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus {i + 1}?", "ground_truth": str(2 * i + 1)} for i in range(32)]
    (work / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    demos = [demonstration(i, i + 1) for i in range(64)]
    (work / "demos.jsonl").write_text("\n".join(json.dumps(d) for d in demos) + "\n")
    (work / "run.yaml").write_text(CONFIG)
    return work / "run.yaml"


def train(
    config: Path, run_dir: Path, raw: list[str], resume: bool = False, timeout_s: float | None = None, gpus: int = 1
) -> int:
    """``rlf train CONFIG --backend verl --gpus GPUS`` (this environment's ``rlf``); its output goes to
    ``RUN-first.log`` or ``RUN-resume.log`` beside the run folder."""
    rlf = Path(sys.executable).with_name("rlf")
    phase = "resume" if resume else "first"
    cmd = [
        str(rlf),
        "train",
        str(config),
        *([f"trainer.steps={STEPS + 1}"] if resume else []),
        "--backend",
        "verl",
        "--gpus",
        str(gpus),
        "--run-dir",
        str(run_dir),
        *(["--resume"] if resume else []),
        "--",
        "trainer.logger=[console,file]",
        *raw,
    ]
    with open(run_dir.parent / f"{run_dir.name}-{phase}.log", "w") as log:
        return subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=config.parent, timeout=timeout_s)


def metrics(path: Path) -> dict[int, dict[str, Any]]:
    """verl's file logger: one ``{"step", "data"}`` line per step."""
    if not path.exists():
        return {}
    return {row["step"]: row["data"] for row in map(json.loads, path.read_text().splitlines())}


def check(run_dir: Path) -> tuple[dict[str, Any], list[str]]:  # noqa: PLR0912, PLR0915 - a list of independent checks of one run's files
    """What verl wrote, and every way it falls short of 2 steps, a checkpoint each, and a resumed 3rd
    whose calls reached the MCP server. verl's file logger writes ``RUN/verl_metrics.jsonl`` (the path
    rlf sets); ``--resume`` first sets the steps it keeps aside in ``verl_metrics.earlier.jsonl``."""
    from rlfcore.backends.verl import EARLIER_METRICS_FILE, METRICS_FILE

    first, resumed = metrics(run_dir / EARLIER_METRICS_FILE), metrics(run_dir / METRICS_FILE)
    problems = []
    if sorted(first) != list(range(1, STEPS + 1)):
        problems.append(f"the first run logged steps {sorted(first)}, not 1..{STEPS}")
    if sorted(resumed) != [STEPS + 1]:
        problems.append(f"the resumed run logged steps {sorted(resumed)}, not only step {STEPS + 1}")
    steps = {**first, **resumed}
    for step, m in sorted(steps.items()):
        for key in ("critic/score/mean", "actor/grad_norm", "timing_s/step"):
            if key not in m:
                problems.append(f"step {step}: verl logged no {key}")
    if not any(m.get("critic/score/max", 0) > 0 for m in steps.values()):
        problems.append("no sample earned a reward: rlf's reward pipeline did not reach verl")
    if not any(m.get("actor/grad_norm", 0) > 0 for m in steps.values()):
        problems.append("every gradient was zero: the actor did not learn")
    ckpt = run_dir / "checkpoints"
    latest = (
        (ckpt / "latest_checkpointed_iteration.txt").read_text().strip()
        if (ckpt / "latest_checkpointed_iteration.txt").exists()
        else None
    )
    if latest != str(STEPS + 1):
        problems.append(f"verl's latest checkpoint is {latest}, not {STEPS + 1}")
    for step in range(1, STEPS + 2):
        actor = ckpt / f"global_step_{step}" / "actor"
        if not actor.is_dir() or not any(actor.iterdir()):
            problems.append(f"no actor checkpoint in {actor}")
    dumps, traces = {}, {}
    for step in range(1, STEPS + 2):
        path = run_dir / "samples" / f"{step}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        dumps[step] = rows
        if not rows or any(not {"input", "output", "score"} <= set(r) for r in rows):
            problems.append(f"verl's rollout dump {path} is missing or lacks input/output/score")
        path = run_dir / "samples" / f"step_{step:06d}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        traces[step] = records
        if len(records) != len(rows):
            problems.append(f"rlf's records {path} hold {len(records)} samples, verl's dump {len(rows)}")
        if len({r.get("id") for r in records}) != len(records):
            problems.append(f"rlf's records {path} repeat a sample: samples were scored on another one's trace")
        for rec in records:
            missing = {"messages", "stop_reason", "tool_calls", "reward", "reward_components", "weight_version"} - set(
                rec
            )
            if missing or rec["weight_version"] != step - 1 or rec["messages"][-1]["role"] != "assistant":
                problems.append(
                    f"rlf's record of {rec.get('id')} in {path} lacks {sorted(missing)} or is not step {step}'s"
                )
                break
        if sorted(round(r["score"], 4) for r in rows) != sorted(
            round(r["reward"], 4) for r in records
        ):  # verl's are float32
            problems.append(f"step {step}: verl's dumped scores are not the rewards of rlf's records")
    records = [r for recs in traces.values() for r in recs]
    calling = [r for r in records if r.get("tool_calls", 0) > 0]
    served = [r for r in calling if r.get("tool_errors", 0) == 0 and _served(r.get("messages", []))]
    if len(calling) * 2 <= len(records):
        problems.append(f"only {len(calling)} of {len(records)} samples called a tool: the warm start did not take")
    if not served:
        problems.append("no tool call came back with the calculator's result: the MCP server was not reached")
    done = run_dir / "summary.json"
    finished = json.loads(done.read_text()) if done.exists() else None
    if finished is None or finished.get("steps") != STEPS + 1:
        problems.append(f"{done} is missing or does not count {STEPS + 1} steps: {finished}")
    summary = {
        "steps": {
            s: {
                k: m.get(k)
                for k in (
                    "critic/score/mean",
                    "actor/grad_norm",
                    "timing_s/step",
                    "timing_s/gen",
                    "timing_s/update_actor",
                    "timing_s/update_weights",
                    "num_turns/mean",
                    "training/rollout_probs_diff_max",
                    "training/rollout_probs_diff_mean",
                    "training/rollout_actor_probs_pearson_corr",
                )
            }
            for s, m in sorted(steps.items())
        },
        "latest_checkpoint": latest,
        "dumped_samples": {s: len(rows) for s, rows in dumps.items()},
        "stop_reasons": {s: sorted({r["stop_reason"] for r in recs}) for s, recs in traces.items()},
        "tool_calls": {s: sum(r["tool_calls"] for r in recs) for s, recs in traces.items()},
        "samples_calling": f"{len(calling)}/{len(records)}",
        "calls_served": len(served),
        "summary": finished,
    }
    return summary, problems


def _served(messages: list[dict[str, Any]]) -> bool:
    """A tool message with a number in it: the calculator's answer, so the server ran the call."""
    return any(m.get("role") == "tool" and str(m.get("content", "")).strip().lstrip("-").isdigit() for m in messages)


def main(argv: list[str]) -> int:
    if not any(ep.name == "rlf" for ep in entry_points(group="verl.plugins")):
        print("rlfcore's verl.plugins entry point is not installed: pip install -e '.[verl]'", file=sys.stderr)
        return 2
    raw = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = argv[: argv.index("--")] if "--" in argv else argv
    gpus = 1
    if "--gpus" in args:
        at = args.index("--gpus")
        gpus = int(args[at + 1])
        args = args[:at] + args[at + 2 :]
    work = Path(args[0] if args else "verl-gpu-check").resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = write_workdir(work)
    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)  # the first run starts fresh; the second resumes it
    raw = RAW + raw
    codes = [train(config, run_dir, raw, gpus=gpus)]
    if codes[0] == 0:
        codes.append(train(config, run_dir, raw, resume=True, gpus=gpus))
    summary, problems = check(run_dir)
    summary.update(exit_codes=codes, problems=problems, logs=str(work))
    print(json.dumps(summary))
    return 0 if codes == [0, 0] and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
