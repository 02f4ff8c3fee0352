"""One CPU evaluator (and so one fork server) per test module: starting one costs seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from execution.evalkit import make_evaluator
from kernelbench_harness.execution.device import DeviceEvaluator


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeviceEvaluator]:
    ev = make_evaluator(tmp_path_factory.mktemp("kbdev"))
    yield ev
    ev.close()
