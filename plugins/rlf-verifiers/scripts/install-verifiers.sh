#!/usr/bin/env bash
# Installs verifiers 0.4.0 beside rlf's dev venv, in a folder of its own (default: plugins/rlf-verifiers/.site),
# for the plugin's tests. verifiers pins mcp==2.0.0 and openai<3; the dev venv has rlf-mcp's mcp>=2.3 and a newer
# openai, which verifiers imports and runs with. So nothing here is resolved against the venv: verifiers and the
# packages it imports that the venv lacks go in with --no-deps, at the versions verifiers 0.4.0 resolved to.
# The tests add the folder to the end of sys.path (the venv's packages come first); RLF_VERIFIERS_SITE moves it.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target="${RLF_VERIFIERS_SITE:-$here/.site}"
pip="${PIP:-$here/../../.venv/bin/pip}"
"$pip" install -q --no-deps --target "$target" --upgrade \
    verifiers==0.4.0 aiofiles==25.1.0 anthropic==2.17.0 connectrpc==0.11.1 docstring_parser==0.18.0 gepa==0.1.4 \
    latex2sympy2_extended==1.11.0 loguru==0.7.3 math-verify==0.9.0 openai-harmony==0.0.8 \
    prime-pydantic-config==0.4.3 prime-runs==0.1.4 prime-sandboxes==0.5.1 prime-traces==0.0.10 prime-tunnel==0.1.15 \
    protobuf-py==0.1.1 protobuf-py-ext==0.1.1 pyqwest==0.12.0 renderers==0.1.12 tomli_w==1.2.0
echo "$target"
