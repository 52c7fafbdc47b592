"""The ``verl.plugins`` entry point: importing it registers the ``rlf_agent`` agent loop and the
``rlf`` reward manager.

verl imports every such entry point in every process (Ray workers included) but reports a failing
one only at debug level, which would leave the loop silently unregistered; so a failure is logged
here as an error, with its traceback, before verl swallows it.
"""

from __future__ import annotations

import logging

log = logging.getLogger("rlfcore.verl")

try:
    from rlfcore.backends.verl import bridge, reward_manager  # noqa: F401  (registration happens on import)
except Exception:
    log.exception(
        "rlf: the verl plugin failed to load; the rlf_agent agent loop is NOT registered, nor the rlf reward manager"
    )
    raise
