"""The local backend behind :class:`~rlfcore.backends.base.Backend`: GRPO (after an SFT warm start)
in this process, on CPU or one GPU, through :mod:`.run`."""

from __future__ import annotations

from collections.abc import Callable

from rlfcore.backends.base import Backend, Outcome, Progress, TrainJob, TrainRequest, refuse


class LocalBackend(Backend):
    """One process, one device; no cluster, no raw overrides."""

    name = "local"

    def prepare(self, request: TrainRequest) -> TrainJob:
        from rlfcore.config import load_config
        from rlfcore.engines.chat import refuse_chat_engine

        refuse(
            self.name,
            request.cluster.set_options(),
            "trains in one process on one device",
            "need --backend verl",
        )
        if request.raw_overrides:
            options = {"-- " + " ".join(request.raw_overrides): True}
            refuse(self.name, options, "has no raw overrides", "(after `--`) are verl settings: use --backend verl")
        config, manager = load_config(request.config_path, request.overrides)
        refuse_chat_engine(config)
        return TrainJob(request, config, manager)

    def run(self, job: TrainJob, progress: Progress | None = None) -> Outcome:
        from rlfcore.backends.local.run import train

        return Outcome(summary=train(job.config, job.manager, job.request.run_dir, progress=progress))

    def resume(self, job: TrainJob, progress: Progress | None = None) -> Outcome:
        from rlfcore.backends.local.run import train

        request = job.request
        summary = train(
            job.config, job.manager, request.run_dir, True, progress, request.resume_from, request.allow_config_change
        )
        return Outcome(summary=summary)

    def dry_run(self, job: TrainJob, echo: Callable[[str], None] = print) -> Outcome:
        """Check the data, the model and the run folder as :meth:`run` would, print the resolved
        config, and start nothing (no plugin set-up, no model load)."""
        import yaml

        from rlfcore.backends.local.resume import check_resume_config
        from rlfcore.backends.local.run import check_model, check_run_dir
        from rlfcore.data import read_rows, training_rows

        config = job.config
        if not config.data.train:
            raise ValueError("the config names no training data: set data.train")
        rows = training_rows(read_rows(config.path(config.data.train)), config)
        check_model(config, config.base_dir)
        check_run_dir(job.request.run_dir, job.request.resume)
        if job.request.resume:
            check_resume_config(job.request.run_dir, config, job.request.allow_config_change)
        model = config.path(config.model.path or "")
        built = "" if (model / "config.json").exists() else " (built from model.init when the run starts)"
        t = config.trainer
        echo(yaml.safe_dump(config.resolved(), sort_keys=False).rstrip())
        echo(
            f"# data.train: {len(rows)} rows; {t.steps} GRPO steps of {t.prompts_per_step} prompts x {config.rollout.n}"
        )
        if config.sft.data and config.sft.steps:
            echo(f"# sft.data: an SFT warm start of {config.sft.steps} steps first")
        echo(f"# model: {model}{built}; device: {config.trainer.device}")
        what = "continue the run in" if job.request.resume else "write"
        echo(f"# dry run: nothing started; the run would {what} {job.request.run_dir}")
        return Outcome()
