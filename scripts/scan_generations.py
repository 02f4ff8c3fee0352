#!/usr/bin/env python3
"""Run kbench's static integrity checks over stored LLM-written candidates (no GPU, nothing imported).

Reads a generations file (one JSON object a line with ``level``, ``problem_id``, ``code`` and optionally
``model`` and ``sample_file``; the format of ``kernelsseum-v0/generations.jsonl``), runs
:func:`kernelbench_harness.execution.guards.static_findings` on every candidate, and prints each flagged
candidate with its findings. A candidate is *flagged* when a finding has severity ``warn`` or stronger
(``info`` findings are not shown).

Usage::

    python scripts/scan_generations.py                      # $KBENCH_SHARED/kernelsseum-v0/generations.jsonl
    python scripts/scan_generations.py PATH [--json OUT]    # another file; also write the findings as JSON

``KBENCH_SHARED`` defaults to ``<repo>/../shared``. Exit status: 0, or 2 when the file is missing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

from kernelbench_harness.core import Severity
from kernelbench_harness.execution.guards import static_findings

REPO = Path(__file__).resolve().parents[1]
_RANK = {Severity.INFO: 0, Severity.WARN: 1, Severity.POLICY: 2, Severity.TIMING: 3, Severity.CHEAT: 4}


def default_path() -> Path:
    shared = Path(os.environ.get("KBENCH_SHARED", REPO.parent / "shared"))
    return shared / "kernelsseum-v0" / "generations.jsonl"


def scan(path: Path) -> tuple[int, list[dict]]:
    """``(number of candidates, flagged rows)``; each row holds the candidate's identity and findings."""
    flagged = []
    n = 0
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            n += 1
            findings = [x for x in static_findings(row.get("code") or "") if _RANK[x.severity] >= 1]
            if not findings:
                continue
            worst = max(findings, key=lambda x: _RANK[x.severity]).severity
            flagged.append({"line": line_no, "model": row.get("model", ""), "level": row.get("level"),
                            "problem_id": row.get("problem_id"), "sample_file": row.get("sample_file", ""),
                            "worst": str(worst), "findings": [x.to_dict() for x in findings]})
    return n, flagged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", type=Path, default=None, help="generations JSONL (default: shared copy)")
    ap.add_argument("--json", type=Path, default=None, help="also write the flagged candidates here")
    args = ap.parse_args(argv)
    path = args.path or default_path()
    if not path.is_file():
        print(f"no generations file at {path} (set KBENCH_SHARED or pass a path)", file=sys.stderr)
        return 2
    n, flagged = scan(path)
    by_worst = collections.Counter(r["worst"] for r in flagged)
    print(f"{path}: {n} candidates, {len(flagged)} flagged "
          f"({', '.join(f'{k} {v}' for k, v in sorted(by_worst.items())) or 'none'})")
    for r in flagged:
        print(f"\nline {r['line']}: {r['model']} level {r['level']} problem {r['problem_id']} "
              f"[{r['worst']}] {r['sample_file']}")
        for fd in r["findings"]:
            where = f" (line {fd['data']['line']})" if "line" in fd["data"] else ""
            print(f"  - {fd['check']} [{fd['severity']}{'/' + fd['tag'] if fd['tag'] else ''}]: {fd['message']}{where}")
    if args.json:
        args.json.write_text(json.dumps({"path": str(path), "candidates": n, "flagged": flagged}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
