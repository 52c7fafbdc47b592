"""A training run's folder: resolved config, metrics, sample trajectories, checkpoints, curve, summary.

Everything is appended as it happens, so an interrupted run keeps what it finished and ``--resume``
can continue from the last checkpoint.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from rlfcore.backends.local.checkpoint import CheckpointError
from rlfcore.backends.local.lock import RunDirError
from rlfcore.schema import RunConfig
from rlfcore.surrogates import json_line
from rlfcore.trackers import Trackers


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoints = self.path / "checkpoints"
        self.trackers: Trackers | None = None
        """``trainer.loggers``, started by :meth:`open_trackers`; every :meth:`log` feeds them."""

    # --- metrics ---------------------------------------------------------------------------------

    def log(self, metrics: dict[str, Any], file: str = "metrics.jsonl") -> None:
        with (self.path / file).open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.trackers is not None and "step" in metrics:
            self.trackers.log(metrics, metrics["step"], "sft/" if file.startswith("sft") else "")

    def open_trackers(self, config: RunConfig) -> None:
        """Start the trackers ``trainer.loggers`` names (none: nothing to start)."""
        if config.trainer.loggers:
            self.trackers = Trackers.open(config.trainer.loggers, self.path, config.trainer.project, config.resolved())

    def metrics(self, file: str = "metrics.jsonl") -> list[dict[str, Any]]:
        path = self.path / file
        if not path.exists():
            return []
        out = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise RunDirError(f"{path}, line {number}: not a JSON line ({exc}); remove or mend it") from None
        return out

    def drop_torn_line(self, file: str = "metrics.jsonl") -> str | None:
        """Cut a last line a killed process left half-written, so lines appended later stand on their own;
        what was dropped, or ``None``. A whole last line that only lacks its newline gets one."""
        path = self.path / file
        data = path.read_bytes() if path.exists() else b""
        if not data or data.endswith(b"\n"):
            return None
        keep = data.rfind(b"\n") + 1
        try:
            json.loads(data[keep:])
        except ValueError:
            with path.open("r+b") as f:
                f.truncate(keep)
            return f"{path}: dropped its last line, written only in part ({len(data) - keep} bytes)"
        with path.open("ab") as f:
            f.write(b"\n")
        return None

    def truncate_metrics(self, after_step: int, file: str = "metrics.jsonl") -> None:
        """Drop lines past a checkpoint: a resumed run writes them again."""
        kept = [m for m in self.metrics(file) if m.get("step", 0) <= after_step]
        (self.path / file).write_text("".join(json.dumps(m) + "\n" for m in kept))

    def samples(self, step: int, records: list[dict[str, Any]]) -> None:
        folder = self.path / "samples"
        folder.mkdir(exist_ok=True)
        with (folder / f"step_{step:06d}.jsonl").open("w", encoding="utf-8") as f:
            for r in records:
                f.write(json_line(r))

    # --- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(self, name: str, model: Any, tokenizer: Any, state: dict[str, Any]) -> Path:
        """Model (Hugging Face folder), tokenizer, and trainer state with every RNG; written atomically."""
        final = self.checkpoints / name
        tmp = self.checkpoints / f".{name}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            model.save_pretrained(tmp / "model")
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp / "model")
            state = {"rng": rng_state(), **state}  # a caller may pass the state a finished step left
            torch.save(state, tmp / "trainer.pt")
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk must not leave a partial copy behind
            if isinstance(exc, Exception):
                raise CheckpointError(
                    f"could not save the checkpoint {final} ({type(exc).__name__}: {exc}); its partial copy was removed"
                ) from exc
            raise
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return final

    def clear_partial_checkpoints(self) -> list[Path]:
        """Remove the ``.NAME.tmp`` folders of saves a killed process did not finish; the ones removed.
        Only safe while this process holds the folder (:class:`~rlfcore.backends.local.lock.RunLock`)."""
        partial = sorted(p for p in self.checkpoints.glob(".*.tmp") if p.is_dir())
        for p in partial:
            shutil.rmtree(p)
        return partial

    def last_checkpoint(self, prefix: str = "step_") -> Path | None:
        found = self.step_checkpoints(prefix)
        return found[-1] if found else None

    def step_checkpoints(self, prefix: str = "step_") -> list[Path]:
        """The saved checkpoints, oldest first."""
        return sorted(p for p in self.checkpoints.glob(f"{prefix}*") if (p / "trainer.pt").exists())

    def save_config(self, config: RunConfig) -> None:
        config.save(self.path / "config.yaml")

    # --- the end ---------------------------------------------------------------------------------

    def curve(self, title: str = "reward") -> Path | None:
        """reward_curve.png: the mean reward per step and its moving average."""
        metrics = self.metrics()
        if not metrics:
            return None
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        steps = [m["step"] for m in metrics]
        rewards = [m["reward_mean"] for m in metrics]
        window = max(1, len(rewards) // 10)
        smooth = [
            sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(steps, rewards, alpha=0.35, label="reward (step mean)")
        ax.plot(steps, smooth, label=f"moving average ({window})")
        if "tool_use" in metrics[0]:
            ax.plot(steps, [m["tool_use"] for m in metrics], alpha=0.6, label="tool use")
        ax.set_xlabel("step")
        ax.set_ylim(-0.05, 1.05) if all(0 <= r <= 1 for r in rewards) else None
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        out = self.path / "reward_curve.png"
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out

    def close(self) -> None:
        if self.trackers is not None:
            self.trackers.close()
            self.trackers = None


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
