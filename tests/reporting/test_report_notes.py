"""What the report says beside its numbers: the error figures explained under the run's protocol, and a
banner on every page (and leaderboard row) of a run that was timed on a CPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelbench_harness.core import Backend, Candidate, EvalResult, Outcome, Problem, TimingStats
from kernelbench_harness.protocols import get_protocol
from kernelbench_harness.reporting import error_notes, timed_on_cpu, write_leaderboard, write_run_report
from kernelbench_harness.store import Store

GPU = {"device_type": "cuda", "device_name": "NVIDIA H200", "hardware_fingerprint": "hw-gpu",
       "software_fingerprint": "sw-1"}
# as hardware.fingerprint() records a run without a GPU
CPU = {"device": "cpu", "device_type": "cpu", "device_name": "AMD EPYC", "cpu_model": "AMD EPYC", "cuda": None,
       "hardware_fingerprint": "hw-cpu", "software_fingerprint": "sw-1"}
CODE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
BANNER = "Timed on a CPU, not a GPU."


def _problem(pid: int) -> Problem:
    code = (f"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
            f"        return torch.relu(x)  # {pid}\n\ndef get_inputs():\n    return [torch.rand(8)]\n\n"
            f"def get_init_inputs():\n    return []\n")
    return Problem(1, pid, f"ReLU{pid}", code, source=f"synthetic/level1/{pid}_ReLU{pid}.py")


def _timing(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, min_ms=ms, max_ms=ms, ci95_low_ms=ms,
                       ci95_high_ms=ms, n=10, samples_ms=(ms,) * 10, timer="cuda_events", statistic="median")


def _add_run(st: Store, name: str, hardware: dict, protocol: str = "kbench", **overrides: float) -> None:
    probs = [_problem(1), _problem(2)]
    st.create_run(name, model="m", protocol=get_protocol(protocol, **overrides).to_dict(), config={},
                  hardware=hardware, problems=probs)
    trials = [{"ok": True, "max_abs_err": 1e-6, "max_rel_err": 3e-6, "bound": b, "ref_err": e, "detail": ""}
              for b, e in ((2.5e-5, 3e-7), (4.75e-5, 6e-7))]
    for p in probs:
        res = EvalResult(Outcome.CORRECT, compiled=True, correct=True, max_abs_err=1.25e-6, max_rel_err=3.5e-6,
                         allclose_kernelbench=True, candidate=_timing(0.5), eager_ms=1.0, compile_ms=0.8,
                         device="cpu" if hardware is CPU else "cuda:0",
                         extra={"trials": trials} if protocol == "kbench" else {})
        st.record_attempt(name, problem=p, candidate=Candidate(1, p.problem_id, CODE, Backend.detect(CODE), 0, 0, "m"),
                          model="m", sample_id=0, turn=0, messages=None, reply=None, generation=None, result=res)
    st.set_run_status(name, "finished")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    st = Store(f"sqlite:///{tmp_path_factory.mktemp('notes') / 'k.db'}")
    _add_run(st, "gpu-run", GPU)
    _add_run(st, "cpu-run", CPU)
    _add_run(st, "kb-run", GPU, protocol="kernelbench")
    _add_run(st, "k16-run", GPU, fp64_multiple=16.0)
    yield st
    st.close()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _report(store, name: str, tmp_path: Path) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    index = write_run_report(store, name, tmp_path / name, n_resamples=20)
    return index.read_text(encoding="utf-8"), (index.parent / "problems" / "L1_1.html").read_text(encoding="utf-8")


# --- error figures explained -----------------------------------------------------------------------


def test_problem_page_explains_each_error_figure_under_the_fp64_judge(store, tmp_path):
    index, page = _report(store, "gpu-run", tmp_path)
    assert 'id="error-notes"' in page
    notes = _text(page.split('id="error-notes"', 1)[1])
    assert "float64" in notes and "k = 64" in notes and "floor_rel = 4e-06" in notes
    assert "e_ref = max|ref − ref64|" in notes
    assert "unitless ratio" in notes and "in the output's own units" in _text(page).replace("&#39;", "'")
    # KernelBench's allclose is described as recorded beside, not as the verdict
    assert "atol=0.0001, rtol=0.0001" in notes and "not deciding it" in notes
    # each figure links to its explanation and carries it as a tooltip
    assert re.search(r'<a href="#error-notes" title="Largest \|candidate − reference\|[^"]*">max abs</a>', page)
    assert re.search(r'<a href="#error-notes" title="Largest elementwise[^"]*">rel error</a>', page)
    turn = _text(page.split('class="turn', 1)[1])
    assert "against the float64 reference" in turn
    # the bound and the reference's own error: the largest over the stored trials
    assert "correctness bound 4.75e-05" in turn and "e_ref 6e-07" in turn
    assert 'id="error-notes"' in index and "k = 64" in _text(index)


def test_the_notes_follow_the_run_protocol(store, tmp_path):
    _, page = _report(store, "kb-run", tmp_path)
    notes = _text(page.split('id="error-notes"', 1)[1])
    assert "judge allclose" in notes and "float64" not in notes and "correctness bound" not in notes
    assert "Any NaN in the output fails" in notes
    assert "against the fp32 reference" in _text(page.split('class="turn', 1)[1])
    _, k16 = _report(store, "k16-run", tmp_path)
    assert "k = 16" in _text(k16.split('id="error-notes"', 1)[1])  # the stored setting, not the default


def test_error_notes_name_the_tolerances_of_the_precision():
    notes = error_notes(get_protocol("kbench", "bf16").to_dict())
    assert "atol=0.01, rtol=0.01" in notes["KernelBench allclose"] and "at bf16" in notes["correctness bound"]
    assert list(error_notes(get_protocol("cuda-agent").to_dict())) == ["max abs error", "max rel error",
                                                                       "KernelBench allclose"]


# --- a run timed on a CPU --------------------------------------------------------------------------


def test_timed_on_cpu_reads_the_stored_hardware_record():
    assert timed_on_cpu(CPU) and not timed_on_cpu(GPU)
    assert timed_on_cpu({"device": "cpu"}) and not timed_on_cpu({"device": "cuda:0"})
    assert not timed_on_cpu({})  # unknown hardware is not called a CPU


def test_a_cpu_run_report_carries_the_banner_on_every_page(store, tmp_path):
    index, page = _report(store, "cpu-run", tmp_path)
    for html in (index, page):
        assert 'class="banner banner-cpu"' in html and BANNER in html
        assert "do not measure GPU kernels" in html
    # prominent: right under the title, before any figure
    assert index.index('class="banner banner-cpu"') < index.index('id="headline"')
    gpu_index, gpu_page = _report(store, "gpu-run", tmp_path)
    assert BANNER not in gpu_index and BANNER not in gpu_page and 'class="banner banner-cpu"' not in gpu_index


def test_the_leaderboard_marks_cpu_rows_and_groups(store, tmp_path):
    index = write_leaderboard([store], tmp_path / "site", n_resamples=20)
    html = index.read_text(encoding="utf-8")
    board = json.loads((tmp_path / "site" / "data" / "leaderboard.json").read_text())
    cpu_rows = [r for r in board["rows"] if r["run_name"] == "cpu-run"]
    assert cpu_rows and all(r["timed_on_cpu"] for r in cpu_rows)
    assert not any(r["timed_on_cpu"] for r in board["rows"] if r["run_name"] != "cpu-run")
    groups = {tuple(g["runs"]): g["timed_on_cpu"] for g in board["groups"]}
    assert groups[("cpu-run",)] is True and groups[("gpu-run",)] is False
    # the page: a banner naming the run, a badge on each of its rows and on its group, none elsewhere
    assert 'class="banner banner-cpu"' in html and "cpu-run" in _text(html.split('class="banner banner-cpu"', 1)[1][:600])
    rows = re.findall(r"<tr data-cgroup=.*?</tr>", html, flags=re.DOTALL)
    marked = [r for r in rows if 'class="cpu-run"' in r]
    assert len(marked) == len(cpu_rows) and all("CPU-timed" in r and "cpu-run" in r for r in marked)
    assert not any("CPU-timed" in r for r in rows if 'class="cpu-run"' not in r)
    assert "CPU-timed, not GPU kernels</option>" in html
    assert "CPU-timed: speedups are not GPU kernels" in html
    # the run's own report inside the site carries the banner too
    assert BANNER in (tmp_path / "site" / "runs" / "cpu-run" / "index.html").read_text(encoding="utf-8")


def test_an_interrupted_runs_report_says_why_and_how_to_continue_it(tmp_path):
    """The reason a run reads as interrupted (its runner gone) was shown only by `kbench runs list`; the run's
    report said "interrupted" alone."""
    import html

    from sqlalchemy import update

    from kernelbench_harness.store.liveness import current_runner
    from kernelbench_harness.store.models import RunRow

    st = Store(f"sqlite:///{tmp_path / 'k.db'}")
    try:
        st.create_run("cut run", model="m", protocol=get_protocol("kbench").to_dict(),
                      config={"run_config": {"db": "sqlite:///my results.db"}}, hardware=GPU, problems=[_problem(1)])
        machine, ticks = current_runner().start.rsplit("/", 1)
        with st._write() as s:  # this process's pid with another start time: a runner that is gone
            s.execute(update(RunRow).where(RunRow.run_name == "cut run")
                      .values(runner_start=f"{machine}/{int(ticks) + 1}"))
        info = st.get_run("cut run")
        assert info.status == "interrupted" and "runner gone" in info.status_note
        page = html.unescape((write_run_report(st, "cut run", tmp_path / "rep", n_resamples=20)).read_text())
    finally:
        st.close()
    note = re.search(r'<p class="note" id="run-status">(.*?)</p>', page, re.DOTALL)
    assert note is not None
    text = re.sub(r"<[^>]+>", "", note.group(1))
    assert f"This run is interrupted ({info.status_note})" in text
    assert "Continue it with kbench run --run-name 'cut run' --resume --db 'sqlite:///my results.db'." in text
