"""``rlf train CONFIG --backend verl``: convert the data, build and validate verl's config, start verl.

The run folder gets ``verl/train.parquet`` (and ``val.parquet``), ``verl/overrides.txt`` (the exact
Hydra overrides) and ``verl/config.yaml`` (verl's composed config). The launch itself is verl's own
``python -m verl.trainer.main_ppo`` with those overrides, so what runs is plain verl.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rlfcore.backends.verl.hydra import Cluster, compose, validate, verl_overrides

if TYPE_CHECKING:
    from omegaconf import DictConfig

log = logging.getLogger("rlfcore.verl")


@dataclass
class Plan:
    """Everything a verl run needs, checked by verl: its overrides, composed config and files."""

    overrides: list[str]
    config: DictConfig
    train_file: Path
    val_file: Path | None
    run_dir: Path

    def yaml(self) -> str:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(self.config)


def require_verl() -> None:
    """Fail early, naming the fix, when verl is missing; warn when it is not the tested release."""
    from rlfcore.backends.verl import VERL_VERSION

    try:
        import verl
    except ImportError as exc:
        raise RuntimeError(f"the verl backend needs verl {VERL_VERSION}: pip install 'rlfcore[verl]' ({exc})") from None
    if getattr(verl, "__version__", None) != VERL_VERSION:
        log.warning("verl %s is installed; rlf's verl backend is tested with %s", verl.__version__, VERL_VERSION)


def _data_path(path: str, base: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def prepare(
    config_path: str | Path,
    overrides: list[str],
    raw_overrides: list[str],
    run_dir: str | Path,
    cluster: Cluster | None = None,
) -> Plan:
    """Convert the data into ``run_dir/verl``, translate the config, append ``raw_overrides``, validate.

    Raises ConfigError, DataError or TranslationError naming what is wrong; starts nothing.
    """
    require_verl()
    from rlfcore.backends.verl.convert import write_parquet
    from rlfcore.config import load_config
    from rlfcore.data import read_rows
    from rlfcore.runtime import Runtime

    config, manager = load_config(config_path, overrides)
    runtime = Runtime(config, manager)  # routing only: no plugin setup, no servers
    base = Path(config_path).resolve().parent
    if not config.data.train:
        raise ValueError("the config names no training data: set data.train")
    out = Path(run_dir) / "verl"
    train_file = write_parquet(read_rows(_data_path(config.data.train, base)), out / "train.parquet", runtime)
    val_file = None
    if config.data.eval:
        val_file = write_parquet(read_rows(_data_path(config.data.eval, base)), out / "val.parquet", runtime)
    translated = verl_overrides(config, config_path, train_file, val_file, overrides, run_dir, cluster)
    all_overrides = translated + list(raw_overrides)
    cfg = compose(all_overrides)
    validate(cfg)
    plan = Plan(all_overrides, cfg, train_file, val_file, Path(run_dir))
    (out / "overrides.txt").write_text("\n".join(all_overrides) + "\n")
    (out / "config.yaml").write_text(plan.yaml())
    return plan


def command(plan: Plan) -> list[str]:
    """verl's PPO entry with the plan's overrides: the command :func:`launch` runs."""
    return [sys.executable, "-m", "verl.trainer.main_ppo", *plan.overrides]


def launch(plan: Plan) -> int:
    """Run verl's PPO trainer to the end; returns its exit code."""
    return subprocess.call(command(plan))


def main(
    config_path: str | Path,
    overrides: list[str],
    raw_overrides: list[str],
    run_dir: str | Path,
    cluster: Cluster | None = None,
    dry_run: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """What ``rlf train --backend verl`` does: prepare, then print the plan (dry run) or launch verl."""
    plan = prepare(config_path, overrides, raw_overrides, run_dir, cluster)
    files = ", ".join(str(p) for p in (plan.train_file, plan.val_file) if p is not None)
    if dry_run:
        echo(plan.yaml())
        echo(f"# verl config validated; data written to {files}")
        echo(f"# dry run: nothing launched. to launch it by hand: {shlex.join(command(plan))}")
        return 0
    echo(f"verl data: {files}; config: {plan.run_dir / 'verl' / 'config.yaml'}")
    return launch(plan)
