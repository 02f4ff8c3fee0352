"""``scripts/compare_sweeps.py``: two runs of the same candidates side by side (H200 session 28's two sweeps)."""

from __future__ import annotations

import gzip
import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("compare_sweeps", ROOT / "scripts" / "compare_sweeps.py")
cs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cs)  # type: ignore[union-attr]
DOCS = ROOT / "docs" / "gpu" / "2026-12-04-s28"


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[str, str]:
    out = []
    for t in "ab":
        db = tmp_path_factory.mktemp("s28") / f"s28{t}.db"
        with gzip.open(DOCS / f"s28{t}" / f"s28{t}.db.gz") as f, open(db, "wb") as g:
            shutil.copyfileobj(f, g)
        out.append(f"{db}:sweep-cached-s28{t}")
    return out[0], out[1]


def test_the_two_sweeps_verdicts_that_differ_and_the_times_that_moved(stores, capsys) -> None:
    a, b = stores
    A, B = cs.load(a), cs.load(b)
    assert len(A) == len(B) == 248
    assert A[(2, 46)]["outcome"] == "correct" and B[(2, 46)]["tag"] == "torch-work"  # share 0.175 against 0.005
    assert cs.main(["--a", a, "--b", b]) == 0
    out = capsys.readouterr().out
    assert "outcomes that differ: 11" in out and "L2/46: A correct() share 0.174784" in out
    # split by any host-bound time (session 29): the largest moves were rows whose eager time the host paced
    assert "no host-bound time (219): median 0.18%, p95 2.37%" in out and "largest: L2/79 1.026/0.892 ms" in out
    assert "host-bound baseline only (18): median 14.82%" in out and "largest: L3/10 11.212/20.076 ms" in out
    assert "host-bound candidate (11): median 29.94%" in out
    assert "A: 51 large jobs" in out and "B: 50 large jobs" in out


def test_p95_lies_between_the_order_statistics_and_never_below_the_median() -> None:
    """The first version took the order statistic below rank 0.95 (n - 1): with two rows it printed the smaller
    as the p95, below the median (session 29's one-slot pair of L1/65 and L1/71)."""
    assert cs.p95([0.2971, 0.3942]) == pytest.approx(0.2971 + 0.95 * (0.3942 - 0.2971))
    assert cs.p95([0.0297, 0.9766, 1.2766]) == pytest.approx(0.9766 + 0.9 * (1.2766 - 0.9766))
    assert cs.p95(list(range(101))) == pytest.approx(95.0) and cs.p95([5.0]) == 5.0


def test_a_bad_side_is_refused_with_the_fix(stores, tmp_path) -> None:
    with pytest.raises(SystemExit, match="expected STORE:RUN"):
        cs.load(str(tmp_path / "missing.db") + ":x")
    with pytest.raises(SystemExit, match="kbench runs list"):
        cs.load(stores[0].rsplit(":", 1)[0] + ":no-such-run")
