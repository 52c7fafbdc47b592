"""A config as the data page sees it: its dataset's first rows rendered as the model will see them, its
YAML text validated, and any error a config or plugin raises turned into the message a page shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlfcore.ui.allowed import Refused, Roots, refuse_local_plugins
from rlfcore.ui.toolbench import ToolBench


def explain(exc: BaseException) -> str:
    """A config error as ``rlf config`` renders it; any other error as its type and message."""
    render = getattr(exc, "render", None)
    return render() if callable(render) else f"{type(exc).__name__}: {exc}"


def preview(  # noqa: PLR0912 - each way a preview can fail is answered where it happens
    bench: ToolBench, cfg: Path, overrides: list[str], n: int, roots: Roots, set_up: bool = True
) -> dict[str, Any]:
    """A dataset's first rows rendered as the model sees them, with token counts and a length histogram.

    Only a data file inside ``roots`` is read. Without ``set_up`` (a read-only UI) no local plugin is
    imported and no plugin set up: a config naming local plugins is not loaded, and prompts are
    rendered without the tools' schemas."""
    from rlfcore.config import ConfigError, load_config
    from rlfcore.data import read_rows

    try:
        if not set_up:
            refuse_local_plugins(cfg.read_text(errors="replace"))
        config, _ = load_config(cfg, overrides)
    except Refused as exc:
        return {"error": str(exc)}
    except ConfigError as exc:
        return {"error": exc.render()}
    except Exception as exc:
        return {"error": explain(exc)}
    data = config.data.train or config.data.eval
    if not data:
        return {"error": "the config names no data: set data.train or data.eval"}
    path = config.path(data)
    if not roots.holds(path):
        return {
            "error": f"data file {path} is outside the folders this UI serves ({roots.describe()}); "
            "add its folder with --root"
        }
    out: dict[str, Any] = {
        "path": str(path),
        "rows": [],
        "limits": {
            "max_total_tokens": config.rollout.max_total_tokens,
            "max_response_tokens": config.rollout.max_response_tokens,
        },
    }
    try:
        rows = read_rows(path, limit=200)
    except Exception as exc:
        return {**out, "error": explain(exc)}
    tok = None
    model = config.model.tokenizer or config.model.path
    if model:
        where = config.path(model)
        if (where / "tokenizer_config.json").exists():
            from rlfcore.chat import load_tokenizer as load_chat_tokenizer

            tok = load_chat_tokenizer(str(where))
    out["tokenizer"] = str(model) if tok else None
    runtime = None
    if not set_up:
        out["tools_error"] = "read-only: plugins are not set up, so prompts are rendered (and counted) without tools"
    elif not overrides:
        try:
            runtime = bench.runtime(cfg)
        except Exception as exc:
            out["tools_error"] = explain(exc)
    lengths = []
    for k, row in enumerate(rows):
        schemas = (
            [
                t.schema()
                for t in runtime.tools_for(runtime.env_of(row.raw or {"env": row.env}) if runtime else None).values()
            ]
            if runtime
            else []
        )
        text = tok.render(list(row.prompt), schemas, add_generation_prompt=True) if tok else None
        count = len(tok.encode(text)) if tok and text is not None else None
        if count is not None:
            lengths.append(count)
        if k < n:
            out["rows"].append({"id": row.id, "env": row.env, "prompt": row.prompt, "rendered": text, "tokens": count})
    out["histogram"] = histogram(lengths)
    out["counted"] = len(lengths)
    return out


def histogram(values: list[int], bins: int = 12) -> list[tuple[str, int]]:
    """``values`` counted in at most ``bins`` ranges of whole numbers, each labelled ``lo-hi``."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    width = max(1, -(-(hi - lo + 1) // bins))
    counts: dict[int, int] = {}
    for v in values:
        counts[(v - lo) // width] = counts.get((v - lo) // width, 0) + 1
    return [(f"{lo + b * width}-{lo + (b + 1) * width - 1}", counts.get(b, 0)) for b in range((hi - lo) // width + 1)]


def validate(text: str, overrides: list[str], source: Path) -> tuple[list[dict[str, str]], str | None]:
    """Every mistake of a config's YAML text, at its dotted path; or none and the resolved config.

    The text is loaded as if it were the file ``source``: from a copy headed by ``source``'s name (unless
    it is a run's saved copy, headed already), so its relative paths start where a file's would and
    where the UI's folder check counted them, never in the UI's working folder."""
    import tempfile

    import yaml

    from rlfcore.config import ConfigError, load_config
    from rlfcore.paths import recorded_source, source_header

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return [{"path": "(yaml)", "message": f"{where}{getattr(exc, 'problem', None) or exc}"}], None
    if not isinstance(data, dict):
        return [{"path": "(top level)", "message": f"expected a mapping of settings, got {type(data).__name__}"}], None
    try:
        with tempfile.TemporaryDirectory(prefix="rlf-ui-validate-") as folder:
            copy = Path(folder) / "config.yaml"
            copy.write_text(text if recorded_source(text) else source_header(source) + text)
            cfg, _ = load_config(copy, overrides)
    except ConfigError as exc:
        return [{"path": i.path or "(top level)", "message": i.message} for i in exc.issues], None
    except Exception as exc:
        return [{"path": "(plugins)", "message": explain(exc)}], None
    return [], yaml.safe_dump(cfg.resolved(), sort_keys=False)
