#!/usr/bin/env bash
# Installs openenv 0.10.0 in a virtual environment of its own, the Python the tests' OpenEnv servers run with
# (default: ~/.cache/rlf/openenv-0.10.0, outside the checkout, so that no copy of the plugin's folder carries it).
# openenv pins (through fastmcp) mcp<2, which rlf-mcp's mcp>=2.3 in the dev venv refuses; rlf's process never
# imports openenv (the plugin speaks its wire protocol), so the two never meet.
# RLF_OPENENV_VENV moves the folder; PYTHON picks the interpreter it is made from.
set -euo pipefail
target="${RLF_OPENENV_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rlf/openenv-0.10.0}"
python="${PYTHON:-python3}"
[ -x "$target/bin/python" ] || "$python" -m venv "$target"
"$target/bin/pip" install -q openenv==0.10.0
echo "$target"
