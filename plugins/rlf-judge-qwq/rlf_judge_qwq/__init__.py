"""rlf plugin judge-qwq: model-judge rewards from a reasoning model (QwQ-32B) served by vLLM.

Kept import-free so that loading the plugin stays cheap; the API lives in the submodules:
``rlf_judge_qwq.judge`` (``Judge``, ``judge_for``), ``rlf_judge_qwq.settings`` (``JudgeSettings``).
"""

__version__ = "0.1.0"
