"""The rlf config as verl's config: translated, composed and validated by verl's own code; the data
in verl's parquet layout; the dry run of ``rlf train --backend verl``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.docs import read_doc

pytest.importorskip("verl", reason="verl is not installed (pip install 'rlfcore[verl]')")


def _run(tmp: Path, extra: str = "", rows: list[dict] | None = None) -> Path:
    rows = rows or [
        {"id": "a", "prompt": "What is 1 plus 1?", "ground_truth": "2"},
        {
            "id": "b",
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name 2."}],
            "ground_truth": ["two", "2"],
            "extra": {"level": 3},
        },
    ]
    (tmp / "adder.py").write_text("")
    (tmp / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp / "run.yaml").write_text(
        "local_plugins: [adder.py]\nseed: 7\nmodel: {path: Qwen/Qwen3-4B}\ndata: {train: data.jsonl, eval: data.jsonl}\n"
        "rollout: {n: 8, max_turns: 5, max_total_tokens: 6144, max_response_tokens: 4096,\n"
        "          sampling: {temperature: 0.9, top_p: 0.95}}\n"
        "trainer: {steps: 20, prompts_per_step: 16, micro_batch_size: 4, lr: 1.0e-6, kl_coef: 0.001,\n"
        "          clip_ratio: 0.2, clip_ratio_high: 0.28, lr_schedule: cosine}\n" + extra
    )
    return tmp / "run.yaml"


def test_translation_passes_verls_validation(tmp_path):
    from rlfcore.backends.verl.hydra import Cluster
    from rlfcore.backends.verl.launch import prepare

    cluster = Cluster(gpus_per_node=8, nodes=2, rollout="sglang", ray_address="10.0.0.1:6379", tensor_parallel=2)
    plan = prepare(_run(tmp_path), ["rollout.max_turns=6"], [], tmp_path / "out", cluster)
    c = plan.config
    actor, rollout = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert c.algorithm.adv_estimator == "grpo"
    assert (rollout.n, rollout.multi_turn.max_assistant_turns, rollout.multi_turn.enable) == (8, 6, True)
    # the loop keeps prompt + response within max_total_tokens itself; verl pads to the widest each can be
    assert (rollout.prompt_length, rollout.response_length) == (6143, 4096)
    assert (rollout.temperature, rollout.top_p, rollout.calculate_log_probs) == (0.9, 0.95, True)
    assert rollout.agent.default_agent_loop == "rlf_agent"
    assert (rollout.name, rollout.tensor_model_parallel_size) == ("sglang", 2)
    assert (c.data.train_batch_size, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu) == (16, 16, 4)
    assert (actor.optim.lr, actor.optim.lr_scheduler_type, actor.clip_ratio_low, actor.clip_ratio_high) == (
        1e-6,
        "cosine",
        0.2,
        0.28,
    )
    assert actor.use_kl_loss is True and actor.kl_loss_coef == 0.001
    assert (c.trainer.total_training_steps, c.trainer.n_gpus_per_node, c.trainer.nnodes) == (20, 8, 2)
    assert c.ray_kwargs.ray_init.address == "10.0.0.1:6379"
    assert c.actor_rollout_ref.model.path == "Qwen/Qwen3-4B" and c.data.seed == 7
    # the rlf config and its overrides reach the agent loop and the reward function
    assert c.rlf.config == str((tmp_path / "run.yaml").resolve()) and list(c.rlf.overrides) == ["rollout.max_turns=6"]
    reward = c.reward.custom_reward_function
    assert reward.name == "compute_score" and reward.path.endswith("rlfcore/backends/verl/reward.py")
    assert reward.reward_kwargs.rlf_config == c.rlf.config
    assert (tmp_path / "out" / "verl" / "config.yaml").read_text() == plan.yaml()
    assert (tmp_path / "out" / "verl" / "overrides.txt").read_text().splitlines() == plan.overrides


def test_raw_overrides_win_and_odd_strings_survive(tmp_path):
    from rlfcore.backends.verl.launch import metrics_file, prepare

    odd = "rollout.system_prompt=It's a=b \\ path, \\'q\\"
    plan = prepare(
        _run(tmp_path),
        [odd],
        ["actor_rollout_ref.actor.optim.lr=3e-6", "trainer.logger=[console,wandb]"],
        tmp_path / "o",
    )
    assert plan.config.actor_rollout_ref.actor.optim.lr == 3e-6
    assert list(plan.config.trainer.logger) == ["console", "wandb"]
    assert metrics_file(plan) is None  # the raw logger list dropped verl's file logger: no UI curves claimed
    assert list(plan.config.rlf.overrides) == [odd]


@pytest.mark.parametrize(
    "raw, message",
    [
        (["actor_rollout_ref.no_such_key=1"], "no_such_key"),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"], "ppo_micro_batch_size"),
    ],
)
def test_verl_rejections_name_the_setting(tmp_path, raw, message):
    from rlfcore.backends.verl.hydra import TranslationError
    from rlfcore.backends.verl.launch import prepare

    with pytest.raises(TranslationError, match=message):
        prepare(_run(tmp_path), [], raw, tmp_path / "o")


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.lr_schedule=linear", "trainer.lr_schedule: .* set it to constant or cosine"),
        ("trainer.turn_advantage=return_to_go", "trainer.turn_advantage: .* set trainer.turn_advantage=outcome"),
        (
            "trainer.micro_batch_tokens=1000",
            r"trainer.micro_batch_tokens \(1000\).* at least rollout.max_total_tokens \(6144\)",
        ),
        ("trainer.device=cpu", "trainer.device"),
        ("rollout.sampling.seed=3", "rollout.sampling.seed"),
        ("rollout.concurrency=8", "rollout.concurrency"),
        ("engine.name=openai", "engine.name"),
        ("rollout.max_total_tokens=1", "rollout.max_total_tokens"),
    ],
)
def test_untranslatable_settings_are_errors(tmp_path, override, message):
    from rlfcore.backends.verl.hydra import TranslationError
    from rlfcore.backends.verl.launch import prepare

    with pytest.raises(TranslationError, match=message):
        prepare(_run(tmp_path), [override], [], tmp_path / "o")


def test_every_refused_setting_is_named_at_once(tmp_path):
    from rlfcore.backends.verl.hydra import TranslationError
    from rlfcore.backends.verl.launch import prepare

    with pytest.raises(TranslationError) as err:
        prepare(
            _run(tmp_path),
            ["trainer.lr_schedule=linear", "engine.base_url=http://x/v1", "rollout.sampling.seed=1"],
            [],
            tmp_path / "o",
        )
    text = str(err.value)
    assert all(name in text for name in ("trainer.lr_schedule", "engine.base_url", "rollout.sampling.seed"))


def test_a_group_mode_judge_is_refused(tmp_path):
    pytest.importorskip("rlf_judge_qwq")
    from rlfcore.backends.verl.hydra import TranslationError
    from rlfcore.backends.verl.launch import prepare

    config = _run(tmp_path)
    text = config.read_text().replace(
        "local_plugins: [adder.py]", "plugins: [judge-qwq]\nlocal_plugins: [adder.py]\nenvs: {qa: [adder, judge-qwq]}"
    )
    config.write_text(text.replace("eval: data.jsonl}", "eval: data.jsonl, default_env: qa}"))
    assert prepare(config, [], [], tmp_path / "ok").config is not None  # pointwise (the default) runs
    with pytest.raises(TranslationError, match="judge-qwq.mode .*set judge-qwq.mode=pointwise"):
        prepare(config, ["judge-qwq.mode=group"], [], tmp_path / "o")


def test_settings_without_a_verl_default_map(tmp_path):
    from rlfcore.backends.verl.launch import prepare

    overrides = [
        "trainer.micro_batch_tokens=8192",
        "trainer.bf16=false",
        "model.dtype=bfloat16",
        "engine.max_batch_size=48",
        "trainer.samples_per_step=2",
        "rollout.max_response_tokens=9000",
        "trainer.loggers=[tensorboard,mlflow]",
        "trainer.project=calc",
    ]
    plan = prepare(_run(tmp_path), overrides, [], tmp_path / "o", resume=True)
    c = plan.config
    actor, rollout = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert actor.use_dynamic_bsz is True and actor.ppo_max_token_len_per_gpu == 8192
    assert rollout.log_prob_use_dynamic_bsz is True and c.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu == 8192
    assert actor.fsdp_config.dtype == rollout.dtype == "float32" and actor.fsdp_config.model_dtype == "bf16"
    assert rollout.max_num_seqs == 48 and (rollout.seed, actor.fsdp_config.seed) == (7, 7)
    assert c.trainer.rollout_data_dir == str((tmp_path / "o" / "samples").resolve())
    assert c.trainer.resume_mode == "auto"
    assert list(c.trainer.logger) == ["console", "file", "tensorboard", "mlflow"] and c.trainer.project_name == "calc"
    metrics = (tmp_path / "o" / "verl_metrics.jsonl").resolve()  # verl's file logger, read by `rlf ui`
    assert str(metrics) == c.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    assert (rollout.prompt_length, rollout.response_length) == (6143, 6143)  # max_total_tokens caps the response


def test_a_resume_translates_the_recorded_config_as_the_first_run(tmp_path):
    """``--resume`` reads the run's ``config.yaml``, which names every field with its default: none of them
    counts as the user's (CI's e2e once refused the default ``rollout.concurrency`` there), and the model
    and the experiment are the original file's."""
    from rlfcore.backends.verl.launch import prepare
    from rlfcore.config import load_config

    config = _run(tmp_path)
    config.write_text(config.read_text().replace("Qwen/Qwen3-4B", "model") + "engine: {max_batch_size: 48}\n")
    (tmp_path / "model").mkdir()
    first = prepare(config, ["rollout.max_turns=6"], [], tmp_path / "run")
    loaded, _ = load_config(config, ["rollout.max_turns=6"])
    loaded.save(tmp_path / "run" / "config.yaml")
    again = prepare(tmp_path / "run" / "config.yaml", [], [], tmp_path / "run", resume=True)
    record = str((tmp_path / "run" / "config.yaml").resolve())  # the agent loop and the reward read the record,
    kwargs = again.config.reward.custom_reward_function.reward_kwargs  # which holds the overrides already
    assert again.config.rlf.config == kwargs.rlf_config == record and list(kwargs.rlf_overrides) == []
    kwargs.rlf_config, kwargs.rlf_overrides = first.config.rlf.config, first.config.rlf.overrides
    differ = {k: (v, again.config.get(k)) for k, v in first.config.items() if k != "rlf" and again.config.get(k) != v}
    assert set(differ) == {"trainer"} and again.config.trainer.resume_mode == "auto", differ
    assert again.config.actor_rollout_ref.model.path == str((tmp_path / "model").resolve())
    assert again.config.trainer.experiment_name == "run" and again.config.actor_rollout_ref.rollout.max_num_seqs == 48
    assert again.notices == first.notices


def test_examples_translate_unchanged(tmp_path):
    """Every example config runs with --backend verl as it is; what verl does not use is named."""
    from rlfcore.backends.verl.launch import prepare

    examples = sorted((ROOT / "examples").glob("*/run.yaml"))
    assert examples
    for config in examples:
        overrides = []
        if "lora:" in config.read_text() and importlib.util.find_spec("vllm") is None:
            overrides = ["trainer.lora=null"]  # verl validates LoRA against vLLM's version: only its venv has one
        plan = prepare(config, overrides, [], tmp_path / config.parent.name)
        assert plan.config.actor_rollout_ref.rollout.agent.default_agent_loop == "rlf_agent"
        if config.parent.name == "calculator":
            # sft.data is set: verl trains from rlf's warm start; engine.threads is named as unused
            assert plan.sft_model == (tmp_path / "calculator" / "checkpoints" / "sft" / "model").resolve()
            assert plan.config.actor_rollout_ref.model.path == str(plan.sft_model)
            assert any(line.startswith("engine.threads: not used by verl") for line in plan.notices)
            assert plan.config.data.max_prompt_length + 1 == 512


def test_every_rlf_setting_is_in_the_verl_table():
    """No silent drops: each core setting is in docs/verl.md, mapped, run by rlf inside verl, or refused."""
    from pydantic import BaseModel

    from rlfcore.config import RunConfig

    def keys(model: type[BaseModel], prefix: str = ""):
        for name, field in model.model_fields.items():
            sub = field.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel) and name != "init":
                yield from keys(sub, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    doc = read_doc("verl.md")
    missing = [k for k in keys(RunConfig) if f"`{k}`" not in doc]
    assert not missing, f"docs/verl.md does not say what verl does with: {missing}"


def test_parquet_layout_and_round_trip(tmp_path):
    import pyarrow.parquet as pq

    from rlfcore.backends.verl.convert import row_from_verl
    from rlfcore.backends.verl.launch import prepare
    from rlfcore.data import read_rows

    plan = prepare(_run(tmp_path), [], [], tmp_path / "o")
    records = pq.read_table(plan.train_file).to_pylist()
    assert [r["agent_name"] for r in records] == ["rlf_agent"] * 2
    assert [r["data_source"] for r in records] == ["adder"] * 2
    assert [r["extra_info"]["index"] for r in records] == [0, 1]
    assert records[0]["reward_model"]["ground_truth"] == "2"
    assert json.loads(records[1]["reward_model"]["ground_truth"]) == ["two", "2"]
    assert records[1]["prompt"][0] == {"role": "system", "content": "Be brief."}
    for original, record in zip(read_rows(tmp_path / "data.jsonl"), records):
        row = row_from_verl({"raw_prompt": record["prompt"], **record})
        assert (row.id, row.prompt, row.ground_truth, row.extra) == (
            original.id,
            original.prompt,
            original.ground_truth,
            original.extra,
        )


def test_dry_run_prints_the_config_and_launches_nothing(tmp_path, monkeypatch):
    from rlfcore.backends import get_backend
    from rlfcore.backends.base import TrainRequest
    from rlfcore.backends.verl import launch

    monkeypatch.setattr(launch, "launch", lambda plan: pytest.fail("a dry run must not launch"))
    lines: list[str] = []
    backend = get_backend("verl")
    job = backend.prepare(TrainRequest(str(_run(tmp_path)), tmp_path / "o"))
    assert backend.dry_run(job, echo=lines.append).exit_code == 0
    out = "\n".join(lines)
    assert "adv_estimator: grpo" in out and "default_agent_loop: rlf_agent" in out
    assert "nothing launched" in out and "verl.trainer.main_ppo" in out
    metrics = (tmp_path / "o" / "verl_metrics.jsonl").resolve()
    assert f"file logger writes each step's metrics to {metrics}" in out and f"VERL_FILE_LOGGER_PATH: {metrics}" in out
    assert "trainer.logger=[console,file]" in out
    assert (tmp_path / "o" / "verl" / "train.parquet").is_file()


@pytest.mark.parametrize("gpus, nodes", [(8, 1), (4, 2)])
def test_the_documented_search_r1_recipe_validates(tmp_path, gpus, nodes):
    """docs/verl.md's recipe, with its plugin section dropped (the numbers are what verl checks)."""
    import re

    import yaml

    from rlfcore.backends.verl.hydra import Cluster
    from rlfcore.backends.verl.launch import prepare

    doc = read_doc("verl.md")
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "search-r1.yaml" in b]
    recipe = yaml.safe_load(block)
    recipe.pop("deepsearch"), recipe.pop("plugins")
    recipe["data"] = {"train": "data.jsonl"}
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "a", "prompt": "Who?", "ground_truth": "x"}) + "\n")
    (tmp_path / "search-r1.yaml").write_text(yaml.safe_dump(recipe))
    cluster = Cluster(
        gpus_per_node=gpus, nodes=nodes, tensor_parallel=2, ray_address="10.0.0.1:6379" if nodes > 1 else None
    )
    plan = prepare(tmp_path / "search-r1.yaml", [], ["trainer.logger=[console,wandb]"], tmp_path / "o", cluster)
    assert plan.config.trainer.n_gpus_per_node * plan.config.trainer.nnodes == 8
    assert plan.config.actor_rollout_ref.rollout.n == 5


@pytest.mark.parametrize("gpus, micro, expected", [(2, 8, 4), (1, 3, 2)])
def test_micro_batches_split_each_gpus_share_of_a_step(tmp_path, gpus, micro, expected):
    """verl's log-prob and update passes split each GPU's share of the step's samples (here 8 over
    ``gpus``) into whole micro-batches and stop otherwise; the micro-batch is the largest divisor
    of that share not above trainer.micro_batch_size."""
    from rlfcore.backends.verl.hydra import Cluster
    from rlfcore.backends.verl.launch import prepare

    overrides = ["trainer.prompts_per_step=4", "rollout.n=2", f"trainer.micro_batch_size={micro}"]
    c = prepare(_run(tmp_path), overrides, [], tmp_path / "o", Cluster(gpus_per_node=gpus)).config
    a = c.actor_rollout_ref
    assert (
        a.actor.ppo_micro_batch_size_per_gpu,
        a.rollout.log_prob_micro_batch_size_per_gpu,
        a.ref.log_prob_micro_batch_size_per_gpu,
    ) == (expected,) * 3


def test_one_step_off_dry_run_validates_and_a_cpu_launch_names_its_blocker(tmp_path, monkeypatch):
    """``trainer.max_staleness: 1`` is verl's one-step-off trainer: its own config (composed from
    verl's folder), the GPUs split between trainer and rollout pool, the rollout's importance weights
    truncated at the bound; verl validates it. Without GPUs the launch is refused, naming why."""
    from rlfcore.backends import get_backend
    from rlfcore.backends.base import ClusterOptions, TrainRequest
    from rlfcore.backends.verl import launch
    from rlfcore.backends.verl.hydra import ONE_STEP_OFF, TranslationError

    monkeypatch.setattr(launch.subprocess, "call", lambda *a, **k: pytest.fail("nothing may start"))
    config = _run(tmp_path)
    overrides = ["trainer.max_staleness=1", "trainer.importance_bound=3"]
    backend = get_backend("verl")
    request = TrainRequest(str(config), tmp_path / "o", overrides, cluster=ClusterOptions(gpus_per_node=4))
    job = backend.prepare(request)
    lines: list[str] = []
    assert backend.dry_run(job, echo=lines.append).exit_code == 0
    out = "\n".join(lines)
    assert f"-m {ONE_STEP_OFF}" in out and "hybrid_engine: false" in out
    cfg = job.plan.config
    assert (cfg.trainer.n_gpus_per_node, cfg.rollout.n_gpus_per_node) == (2, 2)
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == 3.0
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(TranslationError, match="needs GPUs: it moves weights to its rollout pool through NCCL"):
        launch.launch(job.plan)
    one_gpu = TrainRequest(str(config), tmp_path / "p", overrides)
    with pytest.raises(TranslationError, match="at least 2 per node"):
        backend.prepare(one_gpu)
    with pytest.raises(TranslationError, match=r"max_staleness \(2\): rlf drives verl's one-step-off"):
        backend.prepare(TrainRequest(str(config), tmp_path / "q", ["trainer.max_staleness=2"]))


def _tied_model(folder: Path, tied: bool) -> Path:
    """A model folder's config and weights as far as verl's weight sync cares: whether the head is tied
    to the embedding, and how many parameters there are (3 × 64 × 32 here)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "tie_word_embeddings": tied}))
    save_file({f"w{i}": torch.zeros(64, 32) for i in range(3)}, str(folder / "model.safetensors"))
    return folder


def test_a_tied_model_with_lora_is_merged_before_each_sync_and_sent_in_one_bucket(tmp_path, monkeypatch):
    """vLLM 0.32 loads a tied head only in the same load_weights call as its embedding (one call per
    bucket of verl's sync) and never for LoRA's wrapped embedding: rlf asks verl to merge the adapters
    and to size the bucket for the whole model, and says so; an untied model keeps verl's defaults."""
    from rlfcore.backends.verl import hydra
    from rlfcore.config import load_config

    monkeypatch.setattr(hydra, "VERL_BUCKET_MB", 0)  # the tiny model needs more than "no bucket at all"
    bucket = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
    for tied in (True, False):
        model = _tied_model(tmp_path / f"model-{tied}", tied)
        run = tmp_path / f"run-{tied}"
        run.mkdir()
        config, _ = load_config(_run(run), [f"model.path={model}", "trainer.lora={rank: 8, alpha: 16}"])
        overrides = hydra.verl_overrides(config, run / "run.yaml", run / "train.parquet")
        said = hydra.notices(config)
        if tied:
            assert "actor_rollout_ref.model.lora.merge=true" in overrides
            assert f"{bucket}={1 + 64}" in overrides  # 24 KiB, rounded up to a MB, and a margin
            assert any("tied embeddings" in line and "merges the adapters" in line for line in said)
        else:
            assert not any("lora.merge" in o or bucket in o for o in overrides) and said == []
    assert hydra.tied_bytes(tmp_path / "model-True") == 4 * 3 * 64 * 32
