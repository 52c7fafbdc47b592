"""The verl backend: rlf's loop, plugins and rewards running inside verl (Ray, FSDP, vLLM/SGLang).

rlf plugs into verl without forking it: :mod:`.plugin` is verl's ``verl.plugins`` entry point and
registers the ``rlf_agent`` agent loop (:mod:`.bridge`) and the ``rlf`` reward manager
(:mod:`.reward_manager`); :mod:`.reward` is verl's custom reward function; :mod:`.convert` writes verl's parquet layout; :mod:`.hydra` translates the rlf config into
verl's Hydra overrides; :mod:`.launch` ties them together for ``rlf train --backend verl``.
"""

# Where verl's own ``file`` logger writes each step's metrics in the run folder (``rlf ui`` draws them),
# and where a ``--resume`` sets the earlier steps aside: run-folder names, kept with the code that reads them.
from rlfcore.rundata.metrics import VERL_EARLIER_FILE as EARLIER_METRICS_FILE
from rlfcore.rundata.metrics import VERL_FILE as METRICS_FILE

VERL_VERSION = "0.9.1"
"""The verl release this backend is built and tested against."""

AGENT_NAME = "rlf_agent"
"""The name the agent loop is registered under; every converted row names it in ``agent_name``."""

REWARD_MANAGER = "rlf"
"""The name the reward manager is registered under (``reward.reward_manager.name``)."""

__all__ = ["AGENT_NAME", "EARLIER_METRICS_FILE", "METRICS_FILE", "REWARD_MANAGER", "VERL_VERSION"]
