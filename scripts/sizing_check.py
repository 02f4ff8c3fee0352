"""How long sizing a run's problems takes (the schedule's children, :class:`kernelbench_harness.schedule.Sizing`),
in one child and in the default number, one after the other on this machine; and that both give the same sizes.

    python scripts/sizing_check.py --problems ../shared/kernelbench [--levels 1,2,3] [--settings 1,default]
        [--cache DIR]

Prints one line per setting (children, seconds, problems sized) and whether the sizes agree. With ``--cache`` (a
new folder) each setting keeps and finds sizes there, as a run does in its build cache: the first sizes, the rest
find them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", required=True)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--cache", default=None, help="the folder sizes are kept in between settings (none: not kept)")
    ap.add_argument("--settings", default="1,default",
                    help="children per setting, in order, comma-separated ('default': sizing_workers)")
    a = ap.parse_args()
    settings = [w.strip() for w in a.settings.split(",")]
    if not all(w == "default" or (w.isdigit() and int(w) > 0) for w in settings):
        ap.error(f"--settings {a.settings!r}: give positive numbers of children or 'default', e.g. 1,default")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelbench_harness.errors import ProblemLoadError
    from kernelbench_harness.problems import load_problems
    from kernelbench_harness.schedule import Sizing, sizing_workers

    try:
        ps = load_problems(a.problems, levels=[int(x) for x in a.levels.split(",")])
    except (ProblemLoadError, ValueError) as e:
        ap.error(f"--problems {a.problems} --levels {a.levels}: {e}")
    codes = {p.key: p.code for p in ps.problems}
    got = {}
    for w in settings:
        n = sizing_workers(len(codes)) if w == "default" else int(w)
        t0 = time.perf_counter()
        sizing = Sizing(codes, workers=n, cache=a.cache)
        sizes = sizing.result(600)
        sizing.stop()  # (with --cache, the background child completing lower bounds: not measured here)
        got[len(got)] = sizes
        print(f"sizing {len(codes)} problems in {n} child(ren): {time.perf_counter() - t0:.2f} s, {len(sizes)} sized",
              flush=True)
    first, *rest = got.values()
    print("same sizes:", all(r == first for r in rest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
