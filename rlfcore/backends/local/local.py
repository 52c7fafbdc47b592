"""The local backend: GRPO in one process, CPU or one GPU, generating from the weights it trains.

Each step: take ``prompts_per_step`` rows (a seeded order, so a resumed run sees the same ones), roll
out ``rollout.n`` samples each through the loop with the transformers engine, score them, turn rewards
into group-normalised advantages (one per sample, or per assistant turn with
``trainer.turn_advantage: return_to_go``), and update the policy with the PPO-clip loss over generated
tokens only (the loop's mask), optionally with a KL penalty to the frozen starting model. With
``trainer.lora`` the model is a peft model whose adapters alone train (:mod:`.lora`): the reference is
the same weights with the adapters off, never a copy.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
import shlex
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from rlfcore.agents.rollout import AgentRollout, agent_rollout
from rlfcore.backends.local import asynchronous, grpo, lora
from rlfcore.backends.local.checkpoint import load_error
from rlfcore.backends.local.rundir import RunDir, rng_state, set_rng_state
from rlfcore.chat import HFChatTokenizer
from rlfcore.data import Row
from rlfcore.diagnostics import Advisor, trajectory_warnings
from rlfcore.engines.transformers import TransformersEngine
from rlfcore.failures import check_not_all_failed
from rlfcore.loop import Rollout, Tokens, Trajectory
from rlfcore.rewards import RewardPipeline, turn_returns
from rlfcore.runtime import Runtime
from rlfcore.signals import Interrupted, deferred


def schedule(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    """Learning-rate multiplier per step: linear warmup, then constant, linear or cosine decay."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def autocast(device: torch.device, enabled: bool) -> Any:
    """bf16 autocast on GPUs that support it; a no-op elsewhere (CPU runs stay in float32)."""
    use = enabled and device.type == "cuda" and torch.cuda.is_bf16_supported()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use)


def row_order(n_rows: int, seed: int, step: int, per_step: int) -> list[int]:
    """Indices of the rows of one step: seeded shuffles of the dataset, one per epoch, end to end."""
    start = step * per_step
    return [_epoch_order(n_rows, seed, pos // n_rows)[pos % n_rows] for pos in range(start, start + per_step)]


@functools.lru_cache(maxsize=2)
def _epoch_order(n_rows: int, seed: int, epoch: int) -> tuple[int, ...]:
    """One epoch's shuffle, kept: shuffling the dataset anew for each row took ~20 ms of every step."""
    order = list(range(n_rows))
    random.Random(f"{seed}/{epoch}").shuffle(order)
    return tuple(order)


class LocalTrainer:
    """GRPO on one device. ``run()`` trains from the last checkpoint (if resuming) to ``trainer.steps``.

    ``runtime`` comes from :meth:`Runtime.open`: every step's rollout and scoring run in its one loop.
    """

    def __init__(self, runtime: Runtime, model: Any, hf_tokenizer: Any, rows: list[Row], run_dir: RunDir):
        self.runtime = runtime
        self.cfg = runtime.config.trainer
        self.config = runtime.config
        self.model = model
        self.hf_tokenizer = hf_tokenizer
        self.tok = HFChatTokenizer(hf_tokenizer, self.config.model.chat_template_kwargs)
        self.rows = rows
        self.run_dir = run_dir
        self.device = next(model.parameters()).device
        self.threads = torch.get_num_threads()
        """torch's threads for the update, whatever a decoding engine sets for itself."""
        self.engine = TransformersEngine(
            lora.sampler(model),  # with LoRA: the layers holding the adapters, switched on
            max_batch_size=self.config.engine.max_batch_size,
            device=self.device,
            threads=self.config.engine.threads,
            tokenizer=self.tok,
        )
        self.rollout: Rollout | AgentRollout = agent_rollout(runtime, self.engine, self.tok) or Rollout(
            runtime, self.engine, self.tok
        )
        self.rewards = RewardPipeline(runtime)
        self.adapted = lora.is_adapted(model)
        self.kl = self.cfg.kl_coef > 0
        self.reference = None
        """The frozen starting model of full fine-tuning's KL term; with LoRA, the base weights are it."""
        if self.kl and not self.adapted:
            self.reference = copy.deepcopy(model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.params = lora.trainable(model)
        self.optimizer = torch.optim.AdamW(self.params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, schedule(self.cfg.lr_schedule, self.cfg.warmup_steps, self.cfg.steps)
        )
        self.step = 0
        pad = hf_tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tok.eos_token_ids[0]
        self.temperature = self.config.rollout.sampling.temperature or 1.0
        self.advisor = Advisor()
        """Says, once per kind, when a step cannot learn (zero reward variance, failing tools, truncation)."""
        self.staleness = self.cfg.max_staleness
        """Asynchronous GRPO's bound (:mod:`.asynchronous`); 0: each step rolls out, then updates."""
        if self.staleness:
            asynchronous.check(self)
            self.engine.record_versions = self.engine.refill_on_new_weights = True

    # --- checkpoints -----------------------------------------------------------------------------

    def save(self, rng: dict[str, Any] | None = None) -> None:
        """A checkpoint of the current step; ``rng``: the generators' state as that step left them."""
        state = {"step": self.step, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if rng is not None:
            state["rng"] = rng
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        self.run_dir.save_checkpoint(f"step_{self.step:06d}", self.model, self.hf_tokenizer, state)

    def restore(self, checkpoint: Path) -> None:
        """Weights, optimizer, schedule, RNG and step from a checkpoint; metrics past it are dropped."""
        from safetensors.torch import load_file

        weights_name = lora.ADAPTER_WEIGHTS if self.adapted else "model.safetensors"
        weights_file, state_file = checkpoint / "model" / weights_name, checkpoint / "trainer.pt"
        try:
            weights = load_file(str(weights_file), device=str(self.device))
        except Exception as exc:
            raise load_error(checkpoint, weights_file, exc, self.run_dir.step_checkpoints()) from exc
        try:
            state = torch.load(state_file, map_location=self.device, weights_only=False)
        except Exception as exc:
            raise load_error(checkpoint, state_file, exc, self.run_dir.step_checkpoints()) from exc
        if self.adapted:
            lora.load_weights(self.model, weights, weights_file)
        else:
            self.model.load_state_dict(weights, strict=False)
            if getattr(self.model.config, "tie_word_embeddings", False):
                self.model.tie_weights()
        self.optimizer.load_state_dict(state["optimizer"])
        self._continue_schedule(state["scheduler"]["last_epoch"])
        if self.reference is not None and "reference" in state:
            self.reference.load_state_dict(state["reference"])
        set_rng_state(state["rng"])
        self.step = state["step"]
        self.run_dir.truncate_metrics(self.step)

    def _continue_schedule(self, done: int) -> None:
        """The schedule of this config, ``done`` steps in: the optimizer's restored groups keep the
        recorded learning rate and weight decay, which a resume may have changed (:mod:`.resume`)."""
        for group in self.optimizer.param_groups:
            group["initial_lr"] = self.cfg.lr
            group["weight_decay"] = self.cfg.weight_decay
        factor = schedule(self.cfg.lr_schedule, self.cfg.warmup_steps, self.cfg.steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor, last_epoch=done - 1)

    # --- training --------------------------------------------------------------------------------

    def run(self, on_step: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Train to ``trainer.steps``. Interrupted (Ctrl-C, SIGTERM), the step in progress is dropped and
        the last finished one is saved, unless a checkpoint holds it already; :class:`Interrupted`
        then says where ``--resume`` starts."""
        history: list[dict[str, Any]] = []
        self.engine.policy_version = self.step
        if self.staleness:
            return asynchronous.run(self, history, on_step)
        saved, rng_after, applying = self.step, rng_state(), False
        try:
            while self.step < self.cfg.steps:
                t0 = time.perf_counter()
                collected = self._collect_step()
                applying = True
                with deferred():  # the update, the step count and the logs change together or not at all
                    metrics = self.apply_step(*collected, t0)
                    if self.end_of_step(metrics, history, on_step):
                        saved = self.step
                    rng_after, applying = rng_state(), False  # a held signal is raised after this line
        except KeyboardInterrupt as exc:
            raise self.interrupted(exc, saved, rng_after, applying) from exc
        return history

    def end_of_step(
        self, metrics: dict[str, Any], history: list[dict[str, Any]], on_step: Callable[[dict[str, Any]], None] | None
    ) -> bool:
        """Log a step that was applied, and save it when it is due; returns whether it was saved."""
        self.run_dir.log(metrics)
        history.append(metrics)
        if on_step is not None:
            on_step(metrics)
        if self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps:
            self.save()
            return True
        return False

    def interrupted(self, exc: KeyboardInterrupt, saved: int, rng_after: dict[str, Any], applying: bool) -> Interrupted:
        signum = getattr(exc, "signum", signal.SIGINT)
        if applying:  # only without rlfcore.signals.handled(), which holds a signal until the step is applied
            last = self.run_dir.last_checkpoint()
            where = f"the last checkpoint is {last}" if last is not None else "there is no checkpoint"
            return Interrupted(
                signum, f"Interrupted while applying a step: nothing saved (the weights may hold part of it); {where}."
            )
        if self.step > saved:
            with deferred():
                self.save(rng_after)
        last = self.run_dir.checkpoints / f"step_{self.step:06d}"
        if self.step == 0:
            note = "Interrupted before the first step finished; nothing to resume from."
        elif self.step > saved:
            note = f"Interrupted during step {self.step + 1}: step {self.step} saved in {last}."
        else:
            note = f"Interrupted during step {self.step + 1}: step {self.step} was saved already, in {last}."
        if self.step:
            folder = shlex.quote(str(self.run_dir.path))  # the run folder holds its config: nothing else is needed
            note += f" Resume with: rlf train --run-dir {folder} --resume (it starts at step {self.step + 1})."
        return Interrupted(signum, note)

    def train_step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        return self.apply_step(*self._collect_step(), t0)

    def step_rows(self, step: int) -> list[Row]:
        """The rows of step ``step`` (0-based), in the seeded order every run of this config follows."""
        return [self.rows[i] for i in row_order(len(self.rows), self.config.seed, step, self.cfg.prompts_per_step)]

    def step_seed(self, step: int) -> int:
        """The base of step ``step``'s sampling seeds."""
        return self.config.seed * 1_000_003 + step

    def check_collected(self, trajectories: list[Trajectory], step: int) -> None:
        """Stop the run when every sample of the step failed; say once why a step cannot learn."""
        check_not_all_failed(trajectories, f"step {step + 1}")
        self.advisor(trajectory_warnings(trajectories, self.config, groups=True), f"step {step + 1}")

    def _collect_step(self) -> tuple[list[Trajectory], float, float, int]:
        self.rollout.seed = self.step_seed(self.step)
        collected = self.runtime.run(self._collect_dynamic(self.step_rows(self.step)))  # the run's one loop
        self.check_collected(collected[0], self.step)
        return collected

    def apply_step(
        self, trajectories: list[Trajectory], rollout_s: float, score_s: float, resampled: int, t0: float
    ) -> dict[str, Any]:
        t1 = time.perf_counter()
        train = self._update(trajectories)
        self.step += 1
        metrics = self._metrics(trajectories)
        metrics.update(train)
        metrics.update(
            resampled_groups=resampled,
            rollout_s=rollout_s,
            score_s=score_s,
            train_s=time.perf_counter() - t1,
            step_s=time.perf_counter() - t0,
        )
        if self.cfg.samples_per_step:
            self.run_dir.samples(self.step, [t.record() for t in trajectories[: self.cfg.samples_per_step]])
        return metrics

    async def collect(self, rows: list[Row], seed: int | None = None) -> tuple[list[Trajectory], float, float]:
        t0 = time.perf_counter()
        # a synchronous step's seed is the rollout's own (set per step); steps rolling out together pass theirs
        trajectories = await (self.rollout.run(rows) if seed is None else self.rollout.run(rows, seed=seed))
        t1 = time.perf_counter()
        await self.rewards.score(trajectories)
        return trajectories, t1 - t0, time.perf_counter() - t1

    async def _collect_dynamic(self, rows: list[Row]) -> tuple[list[Trajectory], float, float, int]:
        """:meth:`_collect`, then DAPO's dynamic sampling (``trainer.resample_zero_variance``): a group
        whose rewards are all equal has advantages 0 and teaches nothing, so fresh prompts (rows not in
        this step, in a seeded order) are rolled out, up to the budget, and each group of theirs that
        varies takes the place of a flat one. Also returns how many extra groups were rolled out."""
        trajectories, rollout_s, score_s = await self.collect(rows)
        budget = self.cfg.resample_zero_variance
        if not budget:
            return trajectories, rollout_s, score_s, 0
        groups = _groups(trajectories)
        flat = [i for i, g in enumerate(groups) if _zero_variance(g)]
        fresh = self._fresh_rows(rows)
        drawn = 0
        while flat and drawn < budget and fresh:
            take = min(len(flat), budget - drawn)
            batch, fresh = fresh[:take], fresh[take:]
            drawn += len(batch)
            more, more_rollout_s, more_score_s = await self.collect(batch)
            rollout_s, score_s = rollout_s + more_rollout_s, score_s + more_score_s
            for group in _groups(more):
                if flat and not _zero_variance(group):
                    groups[flat.pop(0)] = group
        return [t for g in groups for t in g], rollout_s, score_s, drawn

    def _fresh_rows(self, rows: list[Row]) -> list[Row]:
        """The rows dynamic sampling may draw at this step: none of the step's own (a row id names one
        group), shuffled by the seed and step, so a resumed run draws the same ones."""
        taken = {r.id for r in rows}
        fresh = [r for r in self.rows if r.id not in taken]
        random.Random(f"{self.config.seed}/resample/{self.step}").shuffle(fresh)
        return fresh

    def _update(self, trajectories: list[Trajectory]) -> dict[str, float]:  # noqa: PLR0912, PLR0915 - one GRPO update, its steps in order; split, its tensors would be passed around
        usable = [t for t in trajectories if t.stop_reason != "error" and any(t.response_mask)]
        if not usable:
            return {
                "loss": 0.0,
                "kl": 0.0,
                "grad_norm": 0.0,
                "clip_frac": 0.0,
                "lr": float(self.scheduler.get_last_lr()[0]),
            }
        adv = self._advantages(usable)
        # Every token sequence of a trajectory trains with its advantages: its own, and an agent
        # episode's earlier segments (agent runs use outcome advantages, one per episode).
        owner = [i for i, t in enumerate(usable) for _ in t.sequences()]
        seqs = [s for t in usable for s in t.sequences()]
        # A sample whose advantages are all 0 (its whole group scored alike) adds nothing to the gradient
        # without a KL term: it still counts in the normalisation, but needs no forward pass.
        active = [j for j, i in enumerate(owner) if any(x != 0.0 for x in adv[i]) or self.kl]
        lengths = [len(s.prompt_ids) + len(s.response_ids) for s in seqs]
        chunks = grpo.pack(lengths, active, self.cfg.micro_batch_size, self.cfg.micro_batch_tokens)
        # A step's prompts start alike (the system prompt with its tools): each micro-batch computes
        # its rows' common start once (grpo.Batch), for the same logprobs and gradients.
        batches = [
            grpo.collate(
                [seqs[j].prompt_ids for j in c],
                [seqs[j].response_ids for j in c],
                [seqs[j].response_mask for j in c],
                self.pad_id,
                share_prefix=True,
            ).to(self.device)
            for c in chunks
        ]
        if self.cfg.turn_advantage == "outcome":
            advantages = [
                torch.tensor([adv[owner[j]][0] for j in c], dtype=torch.float32, device=self.device) for c in chunks
            ]
        else:
            advantages = [
                grpo.response_tensor(
                    [seqs[j].prompt_ids for j in c],
                    [self._token_advantages(usable[owner[j]], adv[owner[j]]) for j in c],
                    b.loss_mask,
                    b.shared,
                )
                for c, b in zip(chunks, batches)
            ]
        total_tokens = float(sum(sum(s.response_mask) for s in seqs))
        total_seqs = float(len(seqs))
        behaviour: list[torch.Tensor] = []
        """Asynchronous GRPO: per micro-batch, the logprob each token was sampled with."""
        if self.staleness:  # one sequence per trajectory: agent episodes are refused (asynchronous.check)
            behaviour = [
                grpo.response_tensor(
                    [seqs[j].prompt_ids for j in c],
                    [asynchronous.behaviour_logprobs(usable[owner[j]]) for j in c],
                    b.loss_mask,
                    b.shared,
                )
                for c, b in zip(chunks, batches)
            ]
        sampling = self.config.rollout.sampling
        cut = (sampling.top_k, sampling.top_p) if self.staleness else (-1, 1.0)

        # One pass over the batch is exactly on-policy: the old logprobs are this forward's own
        # (detached), so the extra no-grad forward that several epochs need is skipped.
        on_policy = self.cfg.epochs_per_step == 1
        old: list[torch.Tensor] = []
        old_cut: list[torch.Tensor] = []
        ref: list[torch.Tensor] | None = None
        with torch.no_grad(), autocast(self.device, self.cfg.bf16), self.holding():
            if not on_policy:
                self.model.eval()
                for b in batches:
                    logp, logp_cut = grpo.forward_logprobs(self.model, b, self.temperature, *cut)
                    old.append(logp)
                    old_cut.append(logp_cut)
            if self.reference is not None:
                ref = [grpo.token_logprobs(self.reference, b, self.temperature) for b in batches]
            elif self.kl:
                self.model.eval()
                with lora.reference(self.model) as base:
                    ref = [grpo.token_logprobs(base, b, self.temperature) for b in batches]

        clip_low = self.cfg.clip_ratio
        clip_high = self.cfg.clip_ratio_high if self.cfg.clip_ratio_high is not None else clip_low
        losses, kls, clips, norms = [], [], [], []
        weights: list[torch.Tensor | None] = [None] * len(batches)
        correction = grpo.Correction()
        if not self.staleness:  # asynchronously, the engine decodes in eval mode between micro-batches
            self.model.train()
        for epoch in range(self.cfg.epochs_per_step):
            self.optimizer.zero_grad(set_to_none=True)
            for k, batch in enumerate(batches):
                with self.holding():  # the engine decodes between micro-batches, not during one
                    with autocast(self.device, self.cfg.bf16):
                        logp, logp_cut = grpo.forward_logprobs(self.model, batch, self.temperature, *cut)
                    if on_policy:
                        old.append(logp.detach())
                        old_cut.append(logp_cut)
                    if behaviour and weights[k] is None:
                        weights[k] = correction.add(old_cut[k], behaviour[k], batch.loss_mask, self.cfg)
                    per_token, clip_frac = grpo.policy_loss(
                        logp, old[k], advantages[k], batch.loss_mask, clip_low, clip_high, weights[k]
                    )
                    if ref is not None:
                        kl_tok = grpo.kl_k3(logp, ref[k])
                        per_token = per_token + self.cfg.kl_coef * kl_tok
                        kls.append(((kl_tok * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1)).item())
                    loss = grpo.aggregate(per_token, batch.loss_mask, self.cfg.loss_agg, total_tokens, total_seqs)
                    loss.backward()
                losses.append(loss.item())
                clips.append(clip_frac.item())
            if chunks:
                norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)))
            with self.holding():  # new weights reach the engine between two of its decode steps
                self.optimizer.step()  # without gradients it changes nothing, and keeps the schedule in step
                if epoch == self.cfg.epochs_per_step - 1:  # tokens sampled mid-update count as the older version
                    self.engine.policy_version = self.step + 1
        drift = self._engine_drift(seqs, chunks, batches, old)
        lr = float(self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        out = {
            "loss": sum(losses) / self.cfg.epochs_per_step,
            "kl": statistics.fmean(kls) if kls else 0.0,
            "grad_norm": statistics.fmean(norms) if norms else 0.0,
            "clip_frac": statistics.fmean(clips) if clips else 0.0,
            "active_fraction": len(active) / len(seqs),
            "lr": lr,
            "logprob_drift": drift,
        }
        if self.staleness:
            out.update(asynchronous.staleness(self, usable))
            out.update(correction.metrics())
        return out

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """The weights, for one micro-batch or the optimizer step (a decoding engine waits), with
        torch's threads as the trainer found them: an engine decoding meanwhile may have set its own."""
        with self.engine.weights_lock:
            threads = torch.get_num_threads()
            if threads != self.threads:
                torch.set_num_threads(self.threads)
            try:
                yield
            finally:
                if threads != self.threads:
                    torch.set_num_threads(threads)

    def _advantages(self, usable: list[Trajectory]) -> list[list[float]]:
        """Per sample: its one advantage (``outcome``), or one per assistant turn (``return_to_go``)."""
        groups = [t.row_id for t in usable]
        if self.cfg.turn_advantage == "outcome":
            return [[a] for a in grpo.group_advantages([t.reward for t in usable], groups, self.cfg.std_normalize)]
        returns = [turn_returns(t, self.config.reward) for t in usable]
        return grpo.return_to_go_advantages(returns, groups, self.cfg.std_normalize)

    @staticmethod
    def _token_advantages(traj: Trajectory, turn_advantages: list[float]) -> list[float]:
        try:
            return grpo.token_advantages(turn_advantages, traj.response_mask)
        except ValueError as exc:
            raise ValueError(f"sample {traj.id}: {exc}") from None

    @staticmethod
    def _engine_drift(
        seqs: list[Tokens], chunks: list[list[int]], batches: list[grpo.Batch], old: list[torch.Tensor]
    ) -> float:
        """Mean |engine logprob - trainer logprob| over generated tokens: a token-level correctness check."""
        total, count = 0.0, 0
        for c, batch, logp in zip(chunks, batches, old):
            rows = logp.detach().cpu().tolist()
            for row, i in zip(rows, c):
                t = seqs[i]
                start = len(t.prompt_ids) - batch.shared - 1
                for j, (m, lp) in enumerate(zip(t.response_mask, t.logprobs)):
                    if m:
                        total += abs(lp - row[start + j])
                        count += 1
        return total / count if count else 0.0

    def _metrics(self, trajectories: list[Trajectory]) -> dict[str, Any]:
        rewards = [t.reward for t in trajectories]
        n = len(trajectories)
        calls = sum(t.tool_calls for t in trajectories)
        metrics: dict[str, Any] = {
            "step": self.step,
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.pstdev(rewards) if n > 1 else 0.0,
            "tool_calls_per_trajectory": calls / n,
            "tool_use": sum(1 for t in trajectories if t.tool_calls) / n,
            "tool_error_rate": sum(t.tool_errors for t in trajectories) / calls if calls else 0.0,
            "response_length": statistics.fmean(sum(t.response_mask) for t in trajectories),
            "generate_s": statistics.fmean(t.generate_s for t in trajectories),
            "tools_s": statistics.fmean(t.tools_s for t in trajectories),
            "reward_errors": sum(1 for t in trajectories if t.reward_error),
            "zero_variance_groups": sum(1 for g in _groups(trajectories) if _zero_variance(g)),
        }
        components: dict[str, list[float]] = {}
        for t in trajectories:
            for k, v in t.reward_components.items():
                components.setdefault(k, []).append(v)
        metrics.update({f"reward/{k}": statistics.fmean(v) for k, v in sorted(components.items())})
        metrics.update({f"stop/{k}": v for k, v in sorted(Counter(t.stop_reason for t in trajectories).items())})
        return metrics


def _groups(trajectories: list[Trajectory]) -> list[list[Trajectory]]:
    """The samples of each row, in the rows' order: the groups whose rewards advantages normalise."""
    by_row: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_row.setdefault(t.row_id, []).append(t)
    return list(by_row.values())


def _zero_variance(group: list[Trajectory]) -> bool:
    """Every sample scored alike: the group's advantages are all 0."""
    return len({t.reward for t in group}) == 1
