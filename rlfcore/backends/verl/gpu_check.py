"""A few GRPO steps with verl on one GPU: a tiny random-init Qwen3 model, a tool plugin, vLLM rollout.

    python -m rlfcore.backends.verl.gpu_check [WORKDIR] [-- raw verl overrides]

Checks the whole path (entry point in Ray workers, vLLM server client, rlf loop, rlf rewards, FSDP
update) end to end; the model is random, so rewards stay near 0. Needs ``rlfcore[verl]`` installed
(the entry point must be in the environment) and vLLM. Exit code 0 means verl finished its steps.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import entry_points
from pathlib import Path

PLUGIN = '''
from rlfcore import hookimpl
from rlfcore.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@hookimpl
def register_tools(ctx):
    return [add]
'''

STEPS = 3
RAW = [
    "actor_rollout_ref.rollout.enforce_eager=true",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    "reward.num_workers=1",
    "trainer.save_freq=-1",
]


def write_workdir(work: Path) -> Path:
    """The tiny model, the adder plugin, 64 questions and a run config; returns the config path."""
    from rlfcore.tinymodel import build_tiny

    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    model = work / "model"
    if not (model / "config.json").exists():
        texts = ["What is 2 plus 3? The answer is 5.", call] * 50
        build_tiny(texts, model, vocab_size=512, hidden_size=256, num_heads=4, num_kv_heads=2, num_layers=2,
                   intermediate_size=512, max_position_embeddings=4096)
    (work / "adder.py").write_text(PLUGIN)
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(64)]
    (work / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (work / "run.yaml").write_text(
        "local_plugins: [adder.py]\nmodel: {path: model}\ndata: {train: data.jsonl}\n"
        "rollout: {n: 4, max_turns: 2, max_total_tokens: 1536, max_response_tokens: 512, sampling: {max_tokens: 128}}\n"
        f"trainer: {{steps: {STEPS}, prompts_per_step: 8, micro_batch_size: 8, lr: 1.0e-5}}\n"
    )
    return work / "run.yaml"


def main(argv: list[str]) -> int:
    from rlfcore.backends.verl.hydra import Cluster
    from rlfcore.backends.verl.launch import main as launch_main

    if not any(ep.name == "rlf" for ep in entry_points(group="verl.plugins")):
        print("rlfcore's verl.plugins entry point is not installed: pip install -e '.[verl]'", file=sys.stderr)
        return 2
    raw = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = argv[: argv.index("--")] if "--" in argv else argv
    work = Path(args[0] if args else "verl-gpu-check").resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = write_workdir(work)
    cluster = Cluster(gpus_per_node=1, nodes=1, rollout="vllm", gpu_memory_utilization=0.3)
    return launch_main(config, [], RAW + raw, work / "run", cluster)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
