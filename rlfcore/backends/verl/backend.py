"""The verl backend behind :class:`~rlfcore.backends.base.Backend`: the data converted, the config
translated and checked by verl (:func:`.launch.prepare`), then verl's own PPO trainer launched."""

from __future__ import annotations

from collections.abc import Callable

from rlfcore.backends.base import Backend, Outcome, Progress, TrainJob, TrainRequest, refuse


class VerlBackend(Backend):
    """Ray, FSDP and a vLLM/SGLang rollout, on the GPUs the cluster options name."""

    name = "verl"

    def prepare(self, request: TrainRequest) -> TrainJob:
        from rlfcore.backends.verl.hydra import Cluster
        from rlfcore.backends.verl.launch import prepare
        from rlfcore.config import load_config

        if request.resume_from is not None:
            options = {f"--resume-from {request.resume_from}": True}
            refuse(self.name, options, "resumes from its latest checkpoint", "is for --backend local; use --resume")
        c = request.cluster
        cluster = Cluster(
            gpus_per_node=c.gpus_per_node,
            nodes=c.nodes,
            rollout=c.rollout,
            ray_address=c.ray_address,
            tensor_parallel=c.tensor_parallel,
        )
        plan = prepare(
            request.config_path, request.overrides, request.raw_overrides, request.run_dir, cluster, request.resume
        )
        config, manager = load_config(request.config_path, request.overrides)
        return TrainJob(request, config, manager, plan)

    def run(self, job: TrainJob, progress: Progress | None = None) -> Outcome:  # noqa: ARG002 - Backend's signature
        """Launch verl (its own console and file loggers report progress, not ``progress``)."""
        from rlfcore.backends.verl.launch import start

        return Outcome(exit_code=start(job.request.config_path, job.request.overrides, job.plan, resume=False))

    def resume(self, job: TrainJob, progress: Progress | None = None) -> Outcome:  # noqa: ARG002 - as run
        from rlfcore.backends.verl.launch import start

        return Outcome(exit_code=start(job.request.config_path, job.request.overrides, job.plan, resume=True))

    def dry_run(self, job: TrainJob, echo: Callable[[str], None] = print) -> Outcome:
        from rlfcore.backends.verl.launch import dry_run

        return Outcome(exit_code=dry_run(job.plan, echo))
