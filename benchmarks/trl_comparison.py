"""Wall-clock to a mean reward of 0.9 on the embedded calculator task: rlf's local GRPO trainer
against TRL's ``GRPOTrainer``, side by side, from the same SFT checkpoint.

The task is ``examples/calculator`` (what ``rlf train examples/calculator/run.yaml`` runs): a tiny
Qwen3 model and BPE tokenizer built from ``run.yaml``'s ``model.init``, warmed up once by rlf's SFT on
``demos.jsonl`` as ``run.yaml`` configures it (timed and reported apart), then trained by each GRPO
trainer in turn from that same checkpoint. What both get alike:

- the prompts, in the same order (TRL reads rlf's per-step row order, unshuffled): ``prompts_per_step``
  questions a step, ``rollout.n`` samples each (8 × 8 = 64 trajectories, one optimizer step);
- the chat template, tool list and prompt tokens (checked: the rendered prompts are compared);
- sampling (``run.yaml``'s temperature, top-k and top-p), ``sampling.max_tokens`` new tokens per turn, ``max_turns``
  generations (so ``max_turns - 1`` tool-calling rounds), ``max_total_tokens`` overall;
- the loss: PPO-clip (0.2 both ways) on generated tokens only, one pass per batch, token-mean over the
  whole step (TRL's ``dapo``), advantages normalised by the group's std (TRL's ``scale_rewards=group``;
  TRL adds 1e-4 to the std, rlf 1e-6), no KL (``beta=0``), AdamW at ``trainer.lr`` with a constant
  schedule, no weight decay, gradients clipped at 1.0, float32, no gradient checkpointing;
- the reward: rlf's own default score (``rlfcore.builtins.scoring.compute_score``, exact match of the
  final answer) applied to the last assistant message, which is what rlf scores; for TRL it is
  called from a reward function on TRL's parsed completion;
- the thread count (``--threads``, default 2), set before torch is imported.

What differs, by design: rlf's tool is the rlf-mcp plugin's bundled calculator, a real MCP server in
a subprocess reached over stdio; TRL's is a plain in-process Python function doing the same
arithmetic (``rlf_mcp.servers.calculator.evaluate``), so rlf's tool calls cost more. TRL parses calls
with its Qwen3 response schema (the compact template writes calls as Qwen3 does), rlf with its
``hermes`` parser. A call that does not parse ends a TRL trajectory (no tool call, the text is the
answer); rlf answers it with an error result and lets the model go on, which makes some of rlf's
sequences longer. Tool errors read differently (TRL sends ``{'error': ...}``).

Time to target: the cumulative wall-clock of the training loop at the end of the first step whose
rolling mean reward over the last ``--window`` steps (default 5) reaches ``--target`` (0.9). A trainer
stops there, or at ``--max-steps`` / ``--max-seconds``; then it is "not reached" and the best rolling
mean is reported. Setup (loading the model, building the trainer; for rlf also starting the MCP server
unless SFT already started it in this process) is reported apart and not counted. Each step is also
split at the moment the batch is complete: rollout (generation and tool calls) and update (scoring,
advantages, forward/backward, optimizer step). The trainers run one after the other in this process,
so run it on an otherwise idle machine. Tool use (the share of trajectories that called the tool) is
indicative only: rlf's metric counts calls its parser turned into error results (malformed JSON), TRL's
count is of trajectories that got a tool result, which TRL gives only to calls its parser could read.
rlf skips the forward/backward pass of a step whose groups all scored alike (no gradient without KL);
TRL runs it anyway: that shows in the update split while rewards are all 0 or all 1.

    pip install -r benchmarks/requirements-trl.txt
    python benchmarks/trl_comparison.py [--threads 2] [--max-steps 300] [--max-seconds 900]
    python benchmarks/trl_comparison.py --sft-steps 20 --max-steps 3    # smoke run, under a minute

Prints a table and writes JSON to benchmarks/results/trl_comparison.json (or --out).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUN_YAML = ROOT / "examples" / "calculator" / "run.yaml"
DEFAULT_OUT = Path(__file__).parent / "results" / "trl_comparison.json"


@dataclass
class Curve:
    """One trainer's run: per-step mean reward, tool use and cumulative seconds since its loop began."""

    name: str
    rewards: list[float] = field(default_factory=list)
    tool_use: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    rollout_s: list[float] = field(default_factory=list)
    """Per step: generation and tool calls, until the batch is complete."""
    update_s: list[float] = field(default_factory=list)
    """Per step: the rest (scoring, advantages, forward/backward, optimizer step)."""
    setup_s: float = 0.0
    threads: int = 0

    def rolling(self, window: int) -> list[float]:
        """Mean reward over the last ``window`` steps, from the ``window``-th step on."""
        return [statistics.fmean(self.rewards[i - window : i]) for i in range(window, len(self.rewards) + 1)]

    def reached(self, target: float, window: int) -> int | None:
        """The 1-based step at which the rolling mean first reaches ``target``, or None."""
        for k, value in enumerate(self.rolling(window)):
            if value >= target:
                return k + window
        return None

    def done(self, args: argparse.Namespace) -> bool:
        steps = len(self.seconds)
        return (
            self.reached(args.target, args.window) is not None
            or steps >= args.max_steps
            or (steps > 0 and self.seconds[-1] >= args.max_seconds)
        )

    def summary(self, target: float, window: int) -> dict[str, Any]:
        step = self.reached(target, window)
        rolling = self.rolling(window)
        k = max(1, len(self.rewards) // 10)
        return {
            "steps": len(self.rewards),
            "setup_s": self.setup_s,
            "train_s": self.seconds[-1] if self.seconds else 0.0,
            "median_step_s": statistics.median(_diffs(self.seconds)) if self.seconds else None,
            "median_rollout_s": statistics.median(self.rollout_s) if self.rollout_s else None,
            "median_update_s": statistics.median(self.update_s) if self.update_s else None,
            "threads": self.threads,
            "reached": step is not None,
            "steps_to_target": step,
            "seconds_to_target": self.seconds[step - 1] if step is not None else None,
            "best_rolling_mean": max(rolling) if rolling else None,
            "reward_first_10pct": statistics.fmean(self.rewards[:k]) if self.rewards else None,
            "reward_last_10pct": statistics.fmean(self.rewards[-k:]) if self.rewards else None,
            "tool_use_first_10pct": statistics.fmean(self.tool_use[:k]) if self.tool_use else None,
            "tool_use_last_10pct": statistics.fmean(self.tool_use[-k:]) if self.tool_use else None,
            "per_step": {
                "reward_mean": self.rewards,
                "tool_use": self.tool_use,
                "seconds": self.seconds,
                "rollout_s": self.rollout_s,
                "update_s": self.update_s,
            },
        }

    def progress(self) -> None:
        step = len(self.seconds)
        print(
            f"  {self.name} step {step:4d}  reward {self.rewards[step - 1]:.3f}  tool use {self.tool_use[step - 1]:.2f}  "
            f"{self.seconds[-1]:7.1f} s",
            file=sys.stderr,
            flush=True,
        )


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _diffs(cumulative: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *cumulative], cumulative)]


# --- shared setup ----------------------------------------------------------------------------------


def load_run_config(args: argparse.Namespace, work: Path) -> tuple[Any, Any]:
    """``run.yaml`` with the model built in ``work`` (not in the example folder) and the step cap."""
    from rlfcore.config import load_config

    overrides = [f"model.path={work / 'model'}", f"trainer.steps={args.max_steps}"]
    if args.sft_steps is not None:
        overrides.append(f"sft.steps={args.sft_steps}")
    return load_config(RUN_YAML, overrides)


def run_sft(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """rlf's SFT warm start as ``run.yaml`` sets it (``rlf sft``): the checkpoint both trainers start from."""
    from rlfcore.backends.local.run import sft_only

    config, manager = load_run_config(args, work)
    result = sft_only(config, manager, work / "sft")
    return {
        "steps": result["steps"],
        "seconds": result["seconds"],
        "loss_first": result["loss_first"],
        "loss_last": result["loss_last"],
        "model": result["model"],
    }


def rlf_tool_schemas(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The tool list rlf renders into prompts (from the running MCP server), to check TRL's against."""
    from rlfcore.backends.local.model import tool_schemas
    from rlfcore.runtime import Runtime

    config, manager = load_run_config(args, work)
    runtime = Runtime.open(config, manager)  # the run's one loop, as rlf train builds it
    try:
        return tool_schemas(runtime)
    finally:
        runtime.close()


def train_rows(config: Any) -> list[Any]:
    from rlfcore.backends.local.model import resolve
    from rlfcore.data import read_rows

    return read_rows(resolve(config.data.train, RUN_YAML.parent))


# --- rlf -------------------------------------------------------------------------------------------


def run_rlf(args: argparse.Namespace, sft_model: Path, work: Path) -> Curve:
    """rlf's LocalTrainer, one ``train_step`` at a time, as ``rlf train`` runs it after SFT."""
    import torch

    from rlfcore.backends.local.local import LocalTrainer
    from rlfcore.backends.local.model import load_policy
    from rlfcore.backends.local.rundir import RunDir
    from rlfcore.runtime import Runtime

    curve = Curve("rlf")
    config, manager = load_run_config(args, work)
    rows = train_rows(config)
    t0 = time.perf_counter()
    runtime = Runtime.open(config, manager)  # the run's one loop, as rlf train builds it
    try:
        model, tok = load_policy(sft_model, config.trainer.device, config.model.dtype)
        torch.manual_seed(config.seed)
        trainer = LocalTrainer(runtime, model, tok, rows, RunDir(work / "rlf_run"))
        curve.setup_s = time.perf_counter() - t0
        curve.threads = torch.get_num_threads()
        start = time.perf_counter()
        while not curve.done(args):
            metrics = trainer.train_step()
            curve.seconds.append(time.perf_counter() - start)
            curve.rewards.append(metrics["reward_mean"])
            curve.tool_use.append(metrics["tool_use"])
            curve.rollout_s.append(metrics["rollout_s"])
            curve.update_s.append(metrics["step_s"] - metrics["rollout_s"])
            curve.progress()
    finally:
        runtime.close()
    return curve


# --- TRL -------------------------------------------------------------------------------------------


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression: numbers, + - * / // % **, unary minus and parentheses.

    Args:
        expression: The expression, e.g. "12 * (3 + 4) - 2 ** 5".
    """
    from rlf_mcp.servers.calculator import evaluate, format_number

    return format_number(evaluate(expression))


def rlf_score(completion: list[dict[str, Any]], ground_truth: Any) -> float:
    """rlf's default reward on a TRL completion: its score of the last assistant message's content."""
    from rlfcore.builtins.scoring import compute_score
    from rlfcore.types import Sample

    answers = [m for m in completion if m.get("role") == "assistant"]
    response = (answers[-1].get("content") or "") if answers else ""
    score = compute_score(Sample(id="", env=None, messages=completion, response=response, ground_truth=ground_truth))
    return score.value if score is not None else 0.0


def trl_dataset(config: Any, steps: int) -> Any:
    """rlf's rows in rlf's per-step order (``row_order``), so TRL, unshuffled, sees the same prompts."""
    from datasets import Dataset

    from rlfcore.backends.local.local import row_order

    rows = train_rows(config)
    per_step = config.trainer.prompts_per_step
    order = [i for step in range(steps) for i in row_order(len(rows), config.seed, step, per_step)]
    return Dataset.from_list([{"prompt": rows[i].prompt, "ground_truth": rows[i].ground_truth} for i in order])


def check_prompts(tok: Any, dataset: Any, schemas: list[dict[str, Any]]) -> None:
    """TRL's tool list must render to exactly the prompt rlf renders, or the comparison is off."""
    for row in dataset.select(range(min(8, len(dataset)))):
        ours = tok.apply_chat_template(row["prompt"], tools=schemas, add_generation_prompt=True, tokenize=False)
        theirs = tok.apply_chat_template(row["prompt"], tools=[calculate], add_generation_prompt=True, tokenize=False)
        if ours != theirs:
            raise RuntimeError(f"TRL's prompt differs from rlf's:\n rlf: {ours!r}\n TRL: {theirs!r}")


def run_trl(args: argparse.Namespace, sft_model: Path, work: Path, schemas: list[dict[str, Any]]) -> Curve:
    """TRL's GRPOTrainer with the same model, prompts, group size, sampling limits, loss and reward."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_schema

    curve = Curve("trl")
    config, _ = load_run_config(args, work)
    rollout, trainer_cfg = config.rollout, config.trainer
    if getattr(trainer_cfg, "turn_advantage", "outcome") != "outcome":
        raise ValueError("trainer.turn_advantage must be 'outcome' here: TRL gives one advantage per sample")
    dataset = trl_dataset(config, args.max_steps)
    tok = AutoTokenizer.from_pretrained(sft_model, local_files_only=True)
    tok.response_schema = (
        qwen3_schema  # the compact template writes calls as Qwen3 does; TRL only knows Qwen3's by name
    )
    check_prompts(tok, dataset, schemas)
    longest_prompt = max(
        len(
            tok.apply_chat_template(
                r["prompt"], tools=[calculate], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for r in dataset
    )
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(sft_model, dtype=torch.float32, local_files_only=True)

    class Watch(TrainerCallback):
        """Cumulative seconds per optimizer step, split at the reward call; stops at the target or a cap."""

        def __init__(self) -> None:
            self.start = self.begun = self.scored = 0.0

        def on_train_begin(self, *_: Any, **__: Any) -> None:  # TrainerCallback's (args, state, control, **kwargs)
            curve.threads = torch.get_num_threads()
            self.start = time.perf_counter()

        def on_step_begin(self, *_: Any, **__: Any) -> None:  # TrainerCallback's (args, state, control, **kwargs)
            self.begun = time.perf_counter()

        def on_step_end(self, _args: Any, _state: Any, control: Any, **_: Any) -> None:
            now = time.perf_counter()
            curve.seconds.append(now - self.start)
            curve.rollout_s.append(self.scored - self.begun)
            curve.update_s.append(now - self.scored)
            curve.progress()
            if curve.done(args):
                control.should_training_stop = True

    watch = Watch()

    def exact_match(
        prompts: list[Any], completions: list[list[dict[str, Any]]], ground_truth: list[Any], **_: Any
    ) -> list[float]:
        watch.scored = time.perf_counter()  # generation and tool calls of the step are done
        step, per_step = len(curve.rewards), trainer_cfg.prompts_per_step
        expected = [
            r["prompt"] for r in dataset.select(range(step * per_step, (step + 1) * per_step)) for _ in range(rollout.n)
        ]
        if prompts != expected:
            raise RuntimeError(f"TRL's step {step + 1} prompts are not rlf's: {prompts[0]!r} vs {expected[0]!r}")
        rewards = [rlf_score(c, g) for c, g in zip(completions, ground_truth)]
        curve.rewards.append(statistics.fmean(rewards))
        curve.tool_use.append(statistics.fmean(float(any(m.get("role") == "tool" for m in c)) for c in completions))
        return rewards

    grpo_args = GRPOConfig(
        output_dir=str(work / "trl_run"),
        seed=config.seed,
        max_steps=args.max_steps,
        per_device_train_batch_size=trainer_cfg.prompts_per_step * rollout.n,
        gradient_accumulation_steps=1,
        num_generations=rollout.n,
        shuffle_dataset=False,
        temperature=rollout.sampling.temperature,
        top_p=rollout.sampling.top_p,
        top_k=max(rollout.sampling.top_k, 0),
        generation_kwargs={"max_new_tokens": rollout.sampling.max_tokens},  # per turn, as rlf's sampling.max_tokens
        max_completion_length=rollout.max_total_tokens - longest_prompt,  # all turns, as rlf's max_total_tokens
        max_tool_calling_iterations=rollout.max_turns - 1,
        learning_rate=trainer_cfg.lr,
        lr_scheduler_type=trainer_cfg.lr_schedule,
        warmup_steps=trainer_cfg.warmup_steps,
        weight_decay=trainer_cfg.weight_decay,
        max_grad_norm=trainer_cfg.max_grad_norm,
        optim="adamw_torch",
        beta=trainer_cfg.kl_coef,
        num_iterations=trainer_cfg.epochs_per_step,
        epsilon=trainer_cfg.clip_ratio,
        epsilon_high=trainer_cfg.clip_ratio_high,
        loss_type="dapo" if trainer_cfg.loss_agg == "token-mean" else "grpo",
        scale_rewards="group" if trainer_cfg.std_normalize else "none",
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[exact_match],
        args=grpo_args,
        train_dataset=dataset,
        processing_class=tok,
        tools=[calculate],
        callbacks=[watch],
    )
    trainer.remove_callback(PrinterCallback)  # our own progress line instead of the Trainer's log dicts
    curve.setup_s = time.perf_counter() - t0
    trainer.train()
    if len(curve.rewards) != len(curve.seconds):
        raise RuntimeError(
            f"TRL scored {len(curve.rewards)} batches in {len(curve.seconds)} steps; expected one per step"
        )
    return curve


# --- report ----------------------------------------------------------------------------------------


def print_table(result: dict[str, Any]) -> None:
    cfg, sft = result["config"], result["sft"]
    names = [n for n in ("rlf", "trl") if n in result["trainers"]]
    heads = {"rlf": "rlf LocalTrainer", "trl": "TRL GRPOTrainer"}
    rows = [result["trainers"][n] for n in names]

    def fmt(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    def target(t: dict[str, Any]) -> str:
        if t["reached"]:
            return f"{t['seconds_to_target']:.1f} s (step {t['steps_to_target']})"
        return f"not reached (best {fmt(t['best_rolling_mean'], '.3f')})"

    lines = [
        ("setup s", [fmt(t["setup_s"], ".1f") for t in rows]),
        ("steps run", [str(t["steps"]) for t in rows]),
        ("median s/step", [fmt(t["median_step_s"], ".2f") for t in rows]),
        ("  rollout (gen + tools)", [fmt(t["median_rollout_s"], ".2f") for t in rows]),
        ("  update (score + train)", [fmt(t["median_update_s"], ".2f") for t in rows]),
        ("training s", [fmt(t["train_s"], ".1f") for t in rows]),
        (
            "reward first→last 10%",
            [f"{fmt(t['reward_first_10pct'], '.2f')} → {fmt(t['reward_last_10pct'], '.2f')}" for t in rows],
        ),
        (
            "tool use first→last 10%",
            [f"{fmt(t['tool_use_first_10pct'], '.2f')} → {fmt(t['tool_use_last_10pct'], '.2f')}" for t in rows],
        ),
        (f"rolling({cfg['window']}) ≥ {cfg['target']}", [target(t) for t in rows]),
        ("threads", [str(t["threads"]) for t in rows]),
    ]
    sft_s = "reused checkpoint" if sft["seconds"] is None else f"{sft['steps']} steps, {sft['seconds']:.1f} s"
    print(f"SFT warm start (rlf sft, shared by both): {sft_s}")
    print(f"{'':26}" + "".join(f"{heads[n]:>30}" for n in names))
    for label, values in lines:
        print(f"{label:26}" + "".join(f"{v:>30}" for v in values))
    if result.get("trl_over_rlf_time_to_target") is not None:
        print(f"TRL / rlf time to target: {result['trl_over_rlf_time_to_target']:.2f}")
    print(
        f"{cfg['prompts_per_step']} prompts × {cfg['n']} samples per step, lr {cfg['lr']:g}, "
        f"{cfg['max_tokens_per_turn']} tokens per turn, {cfg['max_turns']} turns. Tool: rlf over a real MCP server "
        "(stdio subprocess); TRL as an in-process Python function."
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads for both trainers (and SFT)")
    parser.add_argument("--target", type=float, default=0.9, help="rolling mean reward to reach")
    parser.add_argument("--window", type=int, default=5, help="steps in the rolling mean")
    parser.add_argument("--max-steps", type=int, default=300, help="GRPO steps per trainer at most")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="GRPO training seconds per trainer at most")
    parser.add_argument("--sft-steps", type=int, default=None, help="override run.yaml's sft.steps (for short runs)")
    parser.add_argument(
        "--sft-model", type=Path, default=None, help="start from this SFT checkpoint instead of running SFT"
    )
    parser.add_argument("--trainers", default="rlf,trl", help="comma-separated: rlf, trl")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the model, checkpoints and run folders here")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    trainers = [t.strip() for t in args.trainers.split(",") if t.strip()]
    if not trainers or set(trainers) - {"rlf", "trl"}:
        parser.error(f"--trainers takes rlf and/or trl, got {args.trainers!r}")
    if args.window < 1 or args.max_steps < 1 or args.threads < 1:
        parser.error("--window, --max-steps and --threads must be at least 1")
    if args.sft_model is not None and not (args.sft_model / "config.json").is_file():
        parser.error(
            f"--sft-model {args.sft_model}: no model folder there (an earlier run's --work-dir keeps one in"
            " WORK_DIR/sft/checkpoints/sft/model)"
        )
    if "trl" in trainers and importlib.util.find_spec("trl") is None:
        parser.error("TRL is not installed: pip install -r benchmarks/requirements-trl.txt (or pass --trainers rlf)")

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch is imported, so every pool gets it
        os.environ[var] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="trl_comparison_") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        config, _ = load_run_config(args, work)
        if args.sft_model is not None:
            sft = {"steps": None, "seconds": None, "model": str(args.sft_model)}
        else:
            print("SFT (rlf sft) ...", file=sys.stderr, flush=True)
            sft = run_sft(args, work)
        sft_model = Path(sft["model"])
        curves = {}
        if "rlf" in trainers:
            print("GRPO: rlf LocalTrainer ...", file=sys.stderr, flush=True)
            curves["rlf"] = run_rlf(args, sft_model, work)
        if "trl" in trainers:
            print("GRPO: TRL GRPOTrainer ...", file=sys.stderr, flush=True)
            curves["trl"] = run_trl(args, sft_model, work, rlf_tool_schemas(args, work))

    summaries = {name: c.summary(args.target, args.window) for name, c in curves.items()}
    ratio = None
    if all(name in summaries and summaries[name]["reached"] for name in ("rlf", "trl")):
        ratio = summaries["trl"]["seconds_to_target"] / summaries["rlf"]["seconds_to_target"]
    result = {
        "config": {
            "target": args.target,
            "window": args.window,
            "max_steps": args.max_steps,
            "max_seconds": args.max_seconds,
            "threads": args.threads,
            "prompts_per_step": config.trainer.prompts_per_step,
            "n": config.rollout.n,
            "lr": config.trainer.lr,
            "temperature": config.rollout.sampling.temperature,
            "max_tokens_per_turn": config.rollout.sampling.max_tokens,
            "max_turns": config.rollout.max_turns,
            "max_total_tokens": config.rollout.max_total_tokens,
            "seed": config.seed,
            "versions": {p: _version(p) for p in ("torch", "transformers", "trl")},
        },
        "sft": {k: v for k, v in sft.items() if k != "model"},
        "trainers": summaries,
        "trl_over_rlf_time_to_target": ratio,
        "tools": {"rlf": "rlf-mcp bundled calculator, MCP server over stdio", "trl": "in-process Python function"},
    }
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
