"""``scripts/host_bound_places.py``: each host-bound time beside the CPU its timing process ran on."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("host_bound_places", ROOT / "scripts" / "host_bound_places.py")
hbp = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(hbp)  # type: ignore[union-attr]

# run B of H200 session 27's call 5 (stored before windows recorded their CPU)
STORE = ROOT / "docs" / "gpu" / "2026-12-04-s27" / "hostbound" / "repeat-kbench-hb-B.db.gz"


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    db = tmp_path / "b.db"
    with gzip.open(STORE) as f, open(db, "wb") as g:
        shutil.copyfileobj(f, g)
    return db


def test_the_flagged_times_of_a_stored_run_with_their_values(store: Path) -> None:
    got = [(p["key"], p["what"], round(p["ms"], 4)) for p in hbp.places(store)]
    assert ("L1/12", "candidate", 0.1487) in got and ("L1/5", "compile:default", 0.1706) in got
    assert all(p["host_bound"] for p in hbp.places(store))
    every = hbp.places(store, everything=True)
    assert len(every) > len(got) and any(not p["host_bound"] for p in every)  # --all: the GPU-bound ones too


def test_a_window_that_recorded_its_cpu_shows_it(store: Path) -> None:
    con = sqlite3.connect(store)
    rid, extra = next((i, json.loads(e)) for i, e in con.execute("select id, extra from results")
                      if json.loads(e).get("host_bound") == ["candidate"])
    extra["timing_windows"][-1].update(timer_cpu=[3, 5], timer_node=[0, 1], gpu_node=1)
    con.execute("update results set extra = ? where id = ?", (json.dumps(extra), rid))
    con.commit()
    con.close()
    row = next(p for p in hbp.places(store) if p["what"] == "candidate")
    assert row["timer_cpu"] == [3, 5] and row["timer_node"] == [0, 1] and row["gpu_node"] == 1
