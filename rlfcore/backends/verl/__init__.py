"""The verl backend: rlf's loop, plugins and rewards running inside verl (Ray, FSDP, vLLM/SGLang).

rlf plugs into verl without forking it: :mod:`.plugin` is verl's ``verl.plugins`` entry point and
registers the ``rlf_agent`` agent loop (:mod:`.bridge`) and the ``rlf`` reward manager
(:mod:`.reward_manager`); :mod:`.reward` is verl's custom reward function; :mod:`.convert` writes verl's parquet layout; :mod:`.hydra` translates the rlf config into
verl's Hydra overrides; :mod:`.launch` ties them together for ``rlf train --backend verl``.
"""

VERL_VERSION = "0.9.1"
"""The verl release this backend is built and tested against."""

AGENT_NAME = "rlf_agent"
"""The name the agent loop is registered under; every converted row names it in ``agent_name``."""

REWARD_MANAGER = "rlf"
"""The name the reward manager is registered under (``reward.reward_manager.name``)."""

METRICS_FILE = "verl_metrics.jsonl"
"""Where verl's own ``file`` logger writes each step's metrics in the run folder; ``rlf ui`` draws them."""

EARLIER_METRICS_FILE = "verl_metrics.earlier.jsonl"
"""The metrics of the steps before a ``--resume``, set aside because verl's file logger starts its file anew."""
