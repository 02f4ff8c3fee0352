"""A runner taken as gone and superseded by a resume (store/liveness.py): its end must not overwrite the new
runner's status. Review of a252e97; failed before its fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import update

from kernelbench_harness.core import Problem
from kernelbench_harness.store import Store
from kernelbench_harness.store.models import RunRow


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store(db_url) as st:
        yield st


def test_a_superseded_runner_ending_leaves_the_new_runners_status(store: Store) -> None:
    """The runner's Heartbeat sees that another process runs the run now and says this one goes on; at its end
    execute_run set the run finished (or interrupted) regardless, over the new runner's ``running``: an
    interrupted run is then claimed by a third runner while the second still evaluates it."""
    store.create_run("r", model="m", protocol={"name": "kbench"}, config={}, hardware={},
                     problems=[Problem(1, 1, "P1", "# p1\n")])
    with store._write() as s:  # resumed elsewhere after this runner was taken as gone
        s.execute(update(RunRow).where(RunRow.run_name == "r").values(runner_host="host-b", runner_pid=4242,
                                                                       runner_start=None))
    assert store.set_run_status("r", "interrupted", if_runner=True) is False
    with store._read() as s:
        row = s.query(RunRow).filter_by(run_name="r").one()
        assert (row.status, row.runner_host, row.runner_pid) == ("running", "host-b", 4242)
    # this process's own run: written as before
    store.create_run("mine", model="m", protocol={"name": "kbench"}, config={}, hardware={},
                     problems=[Problem(1, 1, "P1", "# p1\n")])
    assert store.set_run_status("mine", "finished", if_runner=True) is True
    assert store.get_run("mine").status == "finished"


def test_the_runner_ends_its_run_only_while_it_is_the_runner() -> None:
    """execute_run's three places that end a run (a start that failed, the end, a cut) ask for if_runner."""
    import inspect

    from kernelbench_harness import runner

    src = inspect.getsource(runner.execute_run)
    ends = [line for line in src.splitlines() if "set_run_status(" in line and '"finished")' not in line]
    assert len(ends) == 3 and all("if_runner=True" in line for line in ends), ends
