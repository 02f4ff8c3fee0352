"""scripts/gpu/sweep.py's run names: sweeps with different ``--samples`` never share (and so never resume) a run."""

import importlib.util
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "sweep.py"


def _sweep():
    spec = importlib.util.spec_from_file_location("kbench_sweep_script", SWEEP)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_run_names_differ_by_samples():
    sw = _sweep()
    names = {sw.run_name("cached", "s27a", n) for n in (1, 2, 3)}
    assert len(names) == 3
    assert sw.run_name("cached", "s27a", 1) == "sweep-cached-s27a"  # one sample: the name earlier stores hold
    assert sw.run_name("cold", "", 2) == "sweep-cold-s2"
