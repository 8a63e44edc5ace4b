#!/usr/bin/env python3
"""A stand-in for an LLM judge, for `kind = "judge"` scorers (docs/check.md).

cellvisor runs it in the case's workspace with the case as JSON on stdin (its cells'
results, the captured workspace, the scorer's rubric) and reads one JSON object from its
stdout: {"score": 0..1, "reason": "..."}. An LLM judge would send the rubric and the case to
a model; this one scores the fraction of the phrases given as arguments that appear in the
cells' output or in the captured files.
"""

import json
import sys


def main() -> None:
    case = json.load(sys.stdin)
    phrases = sys.argv[1:]
    seen = "".join(cell.get("output", "") for cell in case.get("cells", []))
    for file in case.get("workspace", {}).get("files", []):
        seen += file.get("content") or ""
    found = [p for p in phrases if p in seen]
    missing = [p for p in phrases if p not in seen]
    score = len(found) / len(phrases) if phrases else 0.0
    reason = f"found {len(found)} of {len(phrases)} phrases"
    if missing:
        reason += "; missing: " + ", ".join(missing)
    json.dump({"score": score, "reason": reason}, sys.stdout)


if __name__ == "__main__":
    main()
