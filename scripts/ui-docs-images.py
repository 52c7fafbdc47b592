"""Copy the browser tests' screenshots into docs/img/ as small PNGs for docs/ui.md.

    RLF_UI_SCREENSHOTS=/tmp/shots python -m pytest tests/ui/test_ui_browser.py tests/ui/test_ui_train.py
    python scripts/ui-docs-images.py /tmp/shots

Screenshots of text pages have few colours, so a palette of 64 keeps them legible at a fraction of
the size; each image is cut to MAX_HEIGHT pixels (the page's top, where its point is).
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
MAX_HEIGHT = 1500
LIMIT_BYTES = 150_000
NAMES = {
    "runs.png": "ui-runs.png",
    "compare.png": "ui-compare.png",
    "run-live.png": "ui-run-live.png",
    "trajectories.png": "ui-trajectories.png",
    "side-by-side.png": "ui-side-by-side.png",
    "tokens.png": "ui-tokens.png",
    "tools.png": "ui-tools.png",
    "data.png": "ui-data.png",
    "calculator-live.png": "ui-calculator-live.png",
    "calculator-finished.png": "ui-calculator.png",
}


def shrink(src: Path, dst: Path) -> int:
    """Write ``src`` as a 64-colour PNG cut to MAX_HEIGHT; its size in bytes."""
    with Image.open(src) as opened:
        im = opened.convert("RGB")
        if im.height > MAX_HEIGHT:
            im = im.crop((0, 0, im.width, MAX_HEIGHT))
        im.quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(dst, optimize=True)
    return dst.stat().st_size


def main(shots: Path) -> int:
    missing = [name for name in NAMES if not (shots / name).is_file()]
    if missing:
        print(
            f"{shots} lacks {', '.join(missing)}: run the browser tests with RLF_UI_SCREENSHOTS={shots}",
            file=sys.stderr,
        )
        return 1
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    too_big = []
    for name, out in NAMES.items():
        size = shrink(shots / name, DOCS_IMG / out)
        print(f"{DOCS_IMG / out}: {size / 1000:.0f} kB")
        if size > LIMIT_BYTES:
            too_big.append(out)
    if too_big:
        print(f"over {LIMIT_BYTES // 1000} kB: {', '.join(too_big)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
