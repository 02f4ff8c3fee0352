#!/usr/bin/env python3
"""Input bytes of each KernelBench problem, without allocating them (``get_inputs`` on meta tensors).

    python scripts/input_sizes.py --problems ../shared/kernelbench --level 1 [--min-gib 1] [--ids-only]

Prints ``problem_id GiB`` per problem, or with ``--ids-only`` the comma-separated ids at or above
``--min-gib`` (for ``--ids``: a sweep of the large level-1 problems with fewer slots, say). A problem
whose ``get_inputs`` fails on meta tensors prints ``-1``. Needs only torch; no GPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def input_bytes(path: Path) -> int:
    """Bytes of the tensors ``get_inputs()`` returns for the problem file ``path`` (-1 when it fails)."""
    import torch

    g: dict = {}
    try:
        with torch.device("meta"):
            exec(compile(path.read_text(), str(path), "exec"), g)
            vals = g["get_inputs"]()
        return sum(t.numel() * t.element_size() for t in vals if isinstance(t, torch.Tensor))
    except Exception:  # noqa: BLE001 - reported as -1
        return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", required=True, type=Path)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--min-gib", type=float, default=0.0)
    ap.add_argument("--ids-only", action="store_true")
    a = ap.parse_args()
    folder = a.problems / f"level{a.level}"
    files = sorted((f for f in folder.glob("*.py") if f.name.split("_")[0].isdigit()),
                   key=lambda p: int(p.name.split("_")[0]))
    if not files:
        ap.error(f"no problem files <id>_<Name>.py in {folder} (pass a KernelBench checkout with --problems)")
    rows = [(int(f.name.split("_")[0]), input_bytes(f)) for f in files]
    big = [pid for pid, n in rows if n >= a.min_gib * 2**30]
    if a.ids_only:
        print(",".join(map(str, big)))
    else:
        for pid, n in rows:
            if n >= a.min_gib * 2**30 or n < 0:
                print(pid, round(n / 2**30, 2) if n >= 0 else -1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
