#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests of `rlf ui` (tests/ui/test_ui_browser.py).
# Playwright's own browser download cannot run offline, so the tests launch /usr/bin/chromium.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "chromium already installed: $(chromium --version 2>/dev/null || true)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# Another apt run may hold the lock; wait for it rather than fail.
for attempt in 1 2 3 4 5 6; do
  if $SUDO apt-get -o DPkg::Lock::Timeout=120 update -q && \
     $SUDO apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends chromium fonts-dejavu-core; then
    chromium --version
    exit 0
  fi
  echo "apt-get failed (attempt $attempt), retrying in 10s" >&2
  sleep 10
done
echo "could not install chromium" >&2
exit 1
