#!/usr/bin/env python
"""Per real model family, how many scripted tool-calling trajectories the template check saw and what it
reported: the figures docs/models.md quotes. The trajectories, tokenizers and templates are those of
tests/test_real_sequences.py (real files from package registries, see rlfcore/realmodels.py); this
runs more of them and counts instead of asserting.

    python scripts/family_template_report.py [--trajectories 100] [--no-verl]

Columns: trajectories; those with at least one tool call; tool calls run; trajectories with a tool chain and a mismatch (expected 0);
``reasoning dropped`` reports (Qwen3 with thinking off, whose template leaves earlier empty ``<think>``
blocks out, and Qwen3 whose tool turns are answered by a user reply, a new query after which the
template drops the reasoning: both documented); other mismatches (expected 0); trajectories where verl 0.9.1's continuous-token
builder gives other tokens or mask than rlf's (expected 0). Exits 1 when an expected 0 is not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tests_module():
    """tests/test_real_sequences.py, imported with the repository's root on the path."""
    sys.path.insert(0, str(ROOT))
    import tests.test_real_sequences

    return tests.test_real_sequences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=100, help="per family (the tests run 12)")
    parser.add_argument("--no-verl", action="store_true", help="skip the comparison with verl's builders")
    args = parser.parse_args()

    from rlfcore.realmodels import RealModels
    from rlfcore.sequences import REASONING_DROPPED

    rs = _tests_module()
    models = RealModels()
    header = (
        "case",
        "trajectories",
        "with tool calls",
        "tool calls",
        "tool-turn mismatches",
        "reasoning dropped",
        "other",
        "verl differs",
    )
    rows = []
    bad = 0
    runs = [(name, case, None) for name, case in rs.CASES.items()]
    runs += [(f"{name} + user replies", case, rs.FollowUp()) for name, case in rs.CASES.items() if case.thinking]
    for name, case, plugin in runs:
        hf = models.tokenizer(case.family)
        script = rs.scripts(case, args.trajectories, seed=1)
        _, _, trajs = rs._roll(hf, case, script, plugin=plugin)
        errors = [t for t in trajs if t.stop_reason == "error"]
        dropped = [t for t in trajs if t.template_mismatch and t.template_mismatch.startswith(REASONING_DROPPED)]
        others = [t for t in trajs if t.template_mismatch and t not in dropped]
        on_tool_turns = [t for t in others if t.tool_calls]
        verl = "-"
        if not args.no_verl:
            _, _, theirs = rs._roll(hf, case, script, tokens=rs._verl_builder(hf, case), plugin=plugin)
            differ = sum(
                (a.prompt_ids, a.response_ids, a.response_mask) != (b.prompt_ids, b.response_ids, b.response_mask)
                for a, b in zip(trajs, theirs)
            )
            verl, bad = str(differ), bad + differ
        bad += len(errors) + len(others)
        rows.append((name, str(len(trajs)), str(sum(t.tool_calls > 0 for t in trajs)), str(sum(t.tool_calls for t in trajs)), str(len(on_tool_turns)),
                     str(len(dropped)), str(len(others) - len(on_tool_turns)), verl))  # fmt: skip
        if errors:
            print(f"{name}: {len(errors)} error stops, first: {errors[0].error}", file=sys.stderr)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
