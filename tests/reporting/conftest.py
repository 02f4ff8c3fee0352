"""Fixtures for report tests: one synthetic store and the site built from it, shared by the session."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic_run import build_store

from kernelbench_harness.reporting import write_leaderboard, write_run_report


@pytest.fixture(scope="session")
def synth_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("synthdb") / "kbench.db"
    build_store(path).close()
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def synth_store(synth_db: str):  # type: ignore[no-untyped-def]
    from kernelbench_harness.store import Store

    s = Store(synth_db)
    yield s
    s.close()


@pytest.fixture(scope="session")
def run_report(synth_store, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """``index.html`` of synth-a's report."""
    return write_run_report(
        synth_store, "synth-a", tmp_path_factory.mktemp("report") / "synth-a", n_resamples=200
    )


@pytest.fixture(scope="session")
def site(synth_store, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """Folder of the leaderboard site built from the synthetic store."""
    out = tmp_path_factory.mktemp("site")
    write_leaderboard([synth_store], out, n_resamples=200)
    return out
