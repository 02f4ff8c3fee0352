"""KernelBench baseline JSON files: import into the store (real H100 files from shared/), export back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelbench_harness.baselines_io import (
    export_kernelbench_baselines,
    filename_for_mode,
    import_kernelbench_baselines,
    mode_from_filename,
)
from kernelbench_harness.core import Problem
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.store import Store

SHARED = Path(os.environ.get("KBENCH_SHARED", Path(__file__).resolve().parents[3] / "shared"))
TIMING = SHARED / "kernelbench" / "timing"


def test_mode_names() -> None:
    assert mode_from_filename("baseline_time_torch.json") == "eager"
    assert mode_from_filename("baseline_time_torch_compile_inductor_default.json") == "compile:default"
    assert (
        mode_from_filename("baseline_time_torch_compile_inductor_max-autotune-no-cudagraphs.json")
        == "compile:max-autotune-no-cudagraphs"
    )
    assert (
        mode_from_filename("baseline_time_torch_compile_cudagraphs_default.json")
        == "compile:cudagraphs:default"
    )
    assert mode_from_filename("notes.json") is None
    for mode in ("eager", "compile:default", "compile:reduce-overhead", "compile:cudagraphs:default"):
        assert mode_from_filename(filename_for_mode(mode)) == mode
    with pytest.raises(ConfigError):
        filename_for_mode("jit")


def test_import_export_small(tmp_path: Path) -> None:
    probs = [Problem(1, 1, "Relu", "# relu\n"), Problem(2, 3, "Gemm_Add", "# gemm\n")]
    src = tmp_path / "in"
    src.mkdir()
    data = {
        "level1": {
            "1_Relu.py": {
                "mean": 0.0123,
                "std": 0.001,
                "min": 0.011,
                "max": 0.02,
                "num_trials": 100,
                "hardware": "NVIDIA L40S",
                "device": "cuda:0",
            },
            "7_Unknown.py": {
                "mean": 1.0,
                "std": 0,
                "min": 1,
                "max": 1,
                "num_trials": 100,
                "hardware": "NVIDIA L40S",
                "device": "cuda:0",
            },
        },
        "level2": {
            "3_Gemm_Add.py": {
                "mean": 2.5,
                "std": 0.1,
                "min": 2.4,
                "max": 2.9,
                "num_trials": 100,
                "hardware": "NVIDIA L40S",
                "device": "cuda:0",
            }
        },
    }
    (src / "baseline_time_torch.json").write_text(json.dumps(data))
    (src / "baseline_time_torch_compile_inductor_default.json").write_text(
        json.dumps({"level1": data["level1"]})
    )
    with Store(f"sqlite:///{tmp_path / 'b.db'}") as store:
        summary = import_kernelbench_baselines(store, src, probs)
        assert summary.stored == 3 and summary.by_mode == {"compile:default": 1, "eager": 2}
        assert sorted(summary.unmatched) == ["level1/7_Unknown.py", "level1/7_Unknown.py"]
        rec = store.find_baseline(
            problem_sha256=probs[1].code_sha256,
            hardware_fingerprint="imported:NVIDIA L40S",
            software_fingerprint="imported:in",
            protocol_fingerprint="imported:kernelbench",
            precision="fp32",
            mode="eager",
        )
        assert (
            rec is not None and rec.value_ms == 2.5 and rec.stats.statistic == "mean" and rec.stats.n == 100
        )
        assert not rec.measured_here and rec.source == "imported:NVIDIA L40S"
        files = export_kernelbench_baselines(
            store, tmp_path / "out", hardware_fingerprint="imported:NVIDIA L40S"
        )
        assert sorted(f.name for f in files) == [
            "baseline_time_torch.json",
            "baseline_time_torch_compile_inductor_default.json",
        ]
        back = json.loads((tmp_path / "out" / "baseline_time_torch.json").read_text())
        assert back == {
            "level1": {"1_Relu.py": data["level1"]["1_Relu.py"]},
            "level2": {"3_Gemm_Add.py": data["level2"]["3_Gemm_Add.py"]},
        }
    with pytest.raises(ConfigError):
        import_kernelbench_baselines(None, tmp_path / "nothing-here", probs)
    # the CLI: `baselines list` shows the fingerprint `baselines export` takes; a wrong one is an error that
    # names the stored ones
    from click.testing import CliRunner

    from kernelbench_harness.cli import cli

    db = f"sqlite:///{tmp_path / 'b.db'}"
    listed = CliRunner().invoke(cli, ["baselines", "list", "--db", db])
    assert listed.exit_code == 0 and "imported:NVIDIA L40S  fp32      3  imported  NVIDIA L40S" in listed.output
    bad = CliRunner().invoke(cli, ["baselines", "export", "--out", str(tmp_path / "o2"), "--db", db,
                                   "--hardware-fingerprint", "cpu (Intel Xeon)"], standalone_mode=False)
    assert isinstance(bad.exception, ConfigError) and "imported:NVIDIA L40S fp32 (NVIDIA L40S, 3)" in bad.exception.fix
    fp64 = CliRunner().invoke(cli, ["baselines", "export", "--out", str(tmp_path / "o3"), "--db", db,
                                    "--hardware-fingerprint", "imported:NVIDIA L40S", "--precision", "fp64"])
    assert fp64.exit_code == 2 and "fp64" in fp64.output


@pytest.mark.skipif(not TIMING.is_dir(), reason="shared/kernelbench/timing not available")
def test_import_real_h100_baselines(tmp_path: Path) -> None:
    from kernelbench_harness.problems import load_problems

    ps = load_problems(SHARED / "kernelbench", levels=[1, 2, 3])
    assert len(ps.problems) == 250
    with Store(f"sqlite:///{tmp_path / 'h100.db'}") as store:
        s1 = import_kernelbench_baselines(store, TIMING / "H100_Modal", ps.problems)
        s2 = import_kernelbench_baselines(store, TIMING / "H100_PCIe_LambdaLabs", ps.problems)
        assert s1.stored == 500 and s1.by_mode == {"eager": 250, "compile:default": 250} and not s1.unmatched
        assert s2.stored == 500
        l1_1 = next(p for p in ps.problems if p.key == "L1/1")
        key = dict(
            problem_sha256=l1_1.code_sha256,
            software_fingerprint="imported:H100_Modal",
            protocol_fingerprint="imported:kernelbench",
            precision="fp32",
        )
        eager = store.find_baseline(
            hardware_fingerprint="imported:NVIDIA H100 80GB HBM3", mode="eager", **key
        )
        comp = store.find_baseline(
            hardware_fingerprint="imported:NVIDIA H100 80GB HBM3", mode="compile:default", **key
        )
        assert eager.value_ms == 2.66 and eager.stats.std_ms == 0.0199 and comp.value_ms == 2.67
        # the PCIe card's timings are another hardware key: they never stand in for the SXM ones
        assert (
            store.find_baseline(hardware_fingerprint="imported:NVIDIA H100 PCIe", mode="eager", **key) is None
        )
        df = store.baselines_frame(hardware_fingerprint="imported:NVIDIA H100 PCIe", mode="eager")
        assert len(df) == 250 and (df["source"] == "imported:NVIDIA H100 PCIe").all()
        # export reproduces KernelBench's file (values already at 3 significant figures)
        files = export_kernelbench_baselines(
            store, tmp_path / "x", hardware_fingerprint="imported:NVIDIA H100 80GB HBM3"
        )
        orig = json.loads((TIMING / "H100_Modal" / "baseline_time_torch.json").read_text())
        back = json.loads((tmp_path / "x" / "baseline_time_torch.json").read_text())
        assert len(files) == 2 and back == orig
