"""The bundled suite: its problems load and run, the ``bundled`` adapter serves the right solution for each
problem and variant (and nothing for other problems), and every Triton and C++ solution matches its
reference on the CPU (Triton under its interpreter, the C++ one built through ``load_inline``).

The numerical checks run ``scripts/check_bundled.py`` in child processes, so that ``TRITON_INTERPRET=1``
is set before triton is imported there and never leaks into this test process; the C++ and then the Triton
check run beside the tests before these (tests/early.py; the C++ build takes most of the time).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import early
from early import Early

from kernelbench_harness.adapters.base import GenerationRequest, SampleSpec
from kernelbench_harness.adapters.bundled import VARIANTS, BundledAdapter, find_bundled_solutions
from kernelbench_harness.core import Backend, Problem
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.problems import bundled_problems_dir, load_problems

REPO = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = REPO / "scripts" / "check_bundled.py"
EXPECTED_COUNTS = {1: 4, 2: 3, 3: 2}
# problems that have a CUDA C++ / a host C++ solution
CUDA_KEYS = {"L1/1", "L1/2", "L2/2"}
CPP_KEYS = {"L1/4"}
RTOL = 1e-5

SUITE = load_problems()


def _import_problem(p: Problem) -> ModuleType:
    path = bundled_problems_dir() / f"level{p.level}" / p.file_name
    spec = importlib.util.spec_from_file_location(f"_test_bundled_l{p.level}_{p.problem_id}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _init_params(source: str, cls: str) -> list[str]:
    """Parameter names of ``cls.__init__`` in ``source``, read without importing it."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return [a.arg for a in item.args.args]
    raise AssertionError(f"no {cls}.__init__")


def _generate(adapter: BundledAdapter, spec: SampleSpec) -> Any:
    req = GenerationRequest(spec=spec, turn=0, messages=({"role": "user", "content": ""},))
    return asyncio.run(adapter.generate(req))


# ---------------------------------------------------------------- the problems


def test_suite_counts_ids_and_sources() -> None:
    assert SUITE.issues == ()
    assert SUITE.counts_by_level() == EXPECTED_COUNTS
    for level, n in EXPECTED_COUNTS.items():
        assert [p.problem_id for p in SUITE.problems if p.level == level] == list(range(1, n + 1))
    assert all(p.source.startswith("bundled:level") for p in SUITE.problems)


@pytest.mark.parametrize("problem", SUITE.problems, ids=lambda p: p.key)
def test_model_runs_on_its_inputs(problem: Problem) -> None:
    mod = _import_problem(problem)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    inputs = mod.get_inputs()
    assert inputs and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)
    with torch.no_grad():
        out = model(*inputs)
    assert out.dtype == torch.float32 and out.numel() > 1
    assert torch.isfinite(out).all()
    # not near-constant, not tiny
    assert out.abs().max() > 1e-2 and out.std() > 1e-3 * out.abs().max()


def test_one_problem_has_integer_inputs() -> None:
    int_inputs = {}
    for p in SUITE.problems:
        torch.manual_seed(0)
        dtypes = [t.dtype for t in _import_problem(p).get_inputs()]
        if any(not d.is_floating_point for d in dtypes):
            int_inputs[p.key] = dtypes
    assert int_inputs == {"L2/2": [torch.int64]}


def test_float_inputs_are_signed() -> None:
    """Inputs come from randn (not rand): activations and clamps see both signs."""
    for p in SUITE.problems:
        torch.manual_seed(0)
        for t in _import_problem(p).get_inputs():
            if t.is_floating_point():
                assert t.min() < 0 < t.max(), p.key


# ---------------------------------------------------------------- the solutions on disk


def test_solution_files_cover_the_suite() -> None:
    sols = find_bundled_solutions()
    keys = {(p.level, p.problem_id): p for p in SUITE.problems}
    assert set(sols) == set(keys)
    for key, by_variant in sols.items():
        p = keys[key]
        assert "triton" in by_variant, p.key
        for variant, sol in by_variant.items():
            assert sol.name == p.name
            source = sol.read()
            assert Backend.detect(source) == Backend(variant), sol.path.name
            assert _init_params(source, "ModelNew") == _init_params(p.code, "Model"), sol.path.name
            assert "class Model(" not in source and "import problems" not in source
    assert {f"L{k[0]}/{k[1]}" for k, v in sols.items() if "cuda" in v} == CUDA_KEYS
    assert {f"L{k[0]}/{k[1]}" for k, v in sols.items() if "cpp" in v} == CPP_KEYS


# ---------------------------------------------------------------- the adapter


def test_adapter_identity_and_registry() -> None:
    from kernelbench_harness.adapters import get_adapter

    ad = get_adapter("bundled", options={"device": "cpu"})
    assert isinstance(ad, BundledAdapter)
    assert ad.name == "bundled" and ad.is_llm is False and ad.variant == "auto" and ad.device == "cpu"


def test_auto_on_cpu_serves_triton_for_every_problem() -> None:
    ad = BundledAdapter({"device": "cpu"})
    specs = ad.plan(SUITE.problems, samples=1)
    assert [(s.problem.key, s.sample_id) for s in specs] == [(p.key, 0) for p in SUITE.problems]
    for spec in specs:
        gen = _generate(ad, spec)
        assert gen.error == "" and gen.model == "bundled"
        assert gen.code == gen.text and gen.code
        assert Backend.detect(gen.code) is Backend.TRITON
        assert gen.code == find_bundled_solutions()[(spec.problem.level, spec.problem.problem_id)]["triton"].read()


def test_auto_on_cuda_prefers_cuda_solutions() -> None:
    ad = BundledAdapter({"device": "cuda:0"})
    got = {s.problem.key: Backend.detect(_generate(ad, s).code or "") for s in ad.plan(SUITE.problems, 1)}
    assert {k for k, b in got.items() if b is Backend.CUDA} == CUDA_KEYS
    assert {k for k, b in got.items() if b is Backend.TRITON} == {p.key for p in SUITE.problems} - CUDA_KEYS


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_all_plans_one_sample_per_runnable_variant_in_fixed_order(device: str) -> None:
    ad = BundledAdapter({"variant": "all", "device": device})
    specs = ad.plan(SUITE.problems, samples=5)  # samples is ignored by variant=all
    served: dict[str, list[tuple[int, str]]] = {}
    for s in specs:
        gen = _generate(ad, s)
        assert gen.error == "" and gen.code
        served.setdefault(s.problem.key, []).append((s.sample_id, str(Backend.detect(gen.code))))
    for p in SUITE.problems:
        expected = ["triton"]
        if device == "cuda" and p.key in CUDA_KEYS:
            expected.append("cuda")
        if p.key in CPP_KEYS:
            expected.append("cpp")  # host C++ runs on either device
        assert served[p.key] == list(enumerate(expected)), p.key
    assert VARIANTS == ("triton", "cuda", "cpp")
    # a sample id past the variants gets an error, not someone else's code
    gen = _generate(ad, SampleSpec(SUITE.problems[0], "bundled", 7))
    assert gen.code is None and "no bundled solution" in gen.error


def test_explicit_variant_plans_only_problems_that_have_it() -> None:
    ad = BundledAdapter({"variant": "cpp", "device": "cpu"})
    specs = ad.plan(SUITE.problems, samples=2)
    assert [(s.problem.key, s.sample_id) for s in specs] == [("L1/4", 0), ("L1/4", 1)]
    assert all(Backend.detect(_generate(ad, s).code or "") is Backend.CPP for s in specs)
    ad = BundledAdapter({"variant": "cuda", "device": "cpu"})  # asked for explicitly: served anyway
    assert {s.problem.key for s in ad.plan(SUITE.problems, 1)} == CUDA_KEYS


def test_triton_variant_repeats_for_several_samples() -> None:
    ad = BundledAdapter({"variant": "triton"})
    specs = ad.plan(SUITE.problems[:2], samples=3)
    assert [(s.problem.key, s.sample_id) for s in specs] == [("L1/1", 0), ("L1/1", 1), ("L1/1", 2),
                                                            ("L1/2", 0), ("L1/2", 1), ("L1/2", 2)]
    assert len({_generate(ad, s).code for s in specs[:3]}) == 1


def test_other_problems_get_an_error_not_code() -> None:
    """Same level, id and name as a bundled problem, different code: the sha256 does not match."""
    ad = BundledAdapter({"device": "cpu"})
    real = SUITE.problems[0]
    impostor = Problem(real.level, real.problem_id, real.name, real.code + "\n# edited\n", source="elsewhere")
    unknown = Problem(7, 1, "Not_Ours", real.code, source="elsewhere")
    for p in (impostor, unknown):
        specs = ad.plan([p], samples=1)
        assert [s.sample_id for s in specs] == [0]
        gen = _generate(ad, specs[0])
        assert gen.code is None and gen.text == ""
        assert gen.error.startswith(f"no bundled solution for {p.key}")


def test_bad_options_raise_config_errors() -> None:
    with pytest.raises(ConfigError):
        BundledAdapter({"variant": "fortran"})
    with pytest.raises(ConfigError):
        BundledAdapter({"device": "tpu"})
    with pytest.raises(ConfigError, match=r"no option\(s\) varient; it takes: device, variant"):
        BundledAdapter({"varient": "cuda"})  # was ignored with a warning


# ---------------------------------------------------------------- numerical checks (child processes)


def _end(proc: subprocess.Popen[str]) -> None:
    """Ends a check left running (a session cut short): SIGTERM to its group first, so that ninja ends
    the compilers it started in groups of their own."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_checks(tmp: Path, stoppers: list[Any]) -> Any:
    """Starts check_bundled.py for the C++ and Triton (interpreter) variants, one after the other, in ``tmp``;
    returns the wait for their parsed JSON by variant. One at a time: they run beside the tests (tests/early.py),
    and two at once beside them slow the tests that compute with torch's threads several times over."""
    env = {k: v for k, v in early.environ().items() if not k.startswith("TRITON_")}  # not a test's own changes
    env.update(TRITON_INTERPRET="1", TORCH_EXTENSIONS_DIR=str(tmp / "torch_extensions"),
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    wanted = []
    if shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++"):
        wanted.append("cpp")  # first: the slow C++ build
    if importlib.util.find_spec("triton") is not None:
        wanted.append("triton")

    def launch(variant: str) -> tuple[subprocess.Popen[str], Path]:
        out = tmp / f"{variant}.json"
        cmd = [sys.executable, str(CHECK_SCRIPT), "--device", "cpu", "--variant", variant, "--trials", "3",
               "--rtol", str(RTOL), "--json", str(out)]
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        stoppers.append(lambda proc=proc: _end(proc))
        return proc, out

    first = launch(wanted[0]) if wanted else None

    def wait() -> dict[str, dict[str, Any]]:
        results = {}
        for variant in wanted:
            proc, out = first if variant == wanted[0] else launch(variant)
            log, _ = proc.communicate(timeout=300)
            assert out.exists(), f"check_bundled.py --variant {variant} wrote nothing:\n{log}"
            results[variant] = json.loads(out.read_text())
            results[variant]["log"] = log
        return results

    return wait


# queued when the session is collected (tests/early.py): the C++ build runs beside the tests before these
EARLY = {"checks": Early(_start_checks)}


@pytest.fixture(scope="module")
def checks() -> dict[str, dict[str, Any]]:
    """check_bundled.py's results for the Triton (interpreter) and C++ variants; parsed JSON by variant."""
    return EARLY["checks"].result()


def _rows(checks: dict[str, dict[str, Any]], run: str, variant: str) -> dict[str, dict[str, Any]]:
    """Rows of kind ``variant`` ("reference", "triton", "cpp") from the ``run`` child process, by problem key."""
    if run not in checks:
        pytest.skip(f"no {run} toolchain here (triton not installed, or no C++ compiler)")
    return {f"L{r['level']}/{r['problem_id']}": r for r in checks[run]["rows"] if r["variant"] == variant}


def test_reference_outputs_are_not_degenerate(checks: dict[str, dict[str, Any]]) -> None:
    refs = _rows(checks, "triton", "reference")
    assert set(refs) == {p.key for p in SUITE.problems}
    for key, r in refs.items():
        assert r["ok"], f"{key}: {r.get('error')}"
        assert r["changes_with_inputs"] and r["max_abs_out"] > 1e-2, key


def test_every_triton_solution_matches_under_the_interpreter(checks: dict[str, dict[str, Any]]) -> None:
    rows = _rows(checks, "triton", "triton")
    assert set(rows) == {p.key for p in SUITE.problems}, checks["triton"]["log"]
    for key, r in rows.items():
        assert "max_rel_err" in r, f"{key} failed: {r.get('error')}\n{r.get('trace', '')}"
        assert r["max_rel_err"] <= RTOL, (key, r["max_rel_err"])
        assert not r["inputs_mutated"], key
        assert r["ok"], key
    assert checks["triton"]["ok"] is True


def test_cpp_solution_builds_and_matches(checks: dict[str, dict[str, Any]]) -> None:
    rows = _rows(checks, "cpp", "cpp")
    assert set(rows) == CPP_KEYS, checks["cpp"]["log"]
    for key, r in rows.items():
        assert "max_rel_err" in r, f"{key} failed: {r.get('error')}\n{r.get('trace', '')}"
        assert r["max_rel_err"] <= RTOL and r["ok"] and not r["inputs_mutated"], key
