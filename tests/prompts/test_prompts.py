"""One-shot prompts, the worked examples in them, and multi-turn feedback messages."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from kernelbench_harness.core import EvalResult, Finding, Outcome, Problem, Severity, TimingStats
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.prompts import (
    BACKENDS,
    _raw,
    build_messages,
    extract_code,
    feedback_message,
    trim_middle,
)

PROBLEM = Problem(1, 7, "Scaled_tanh", textwrap.dedent("""\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, alpha: float):
            super().__init__()
            self.alpha = alpha

        def forward(self, x):
            return torch.tanh(x) * self.alpha  # MARKER-7

    def get_inputs():
        return [torch.rand(16, 1024)]

    def get_init_inputs():
        return [2.0]
"""), source="test")


def _timing(ms: float) -> TimingStats:
    return TimingStats(ms, ms, 0.0, ms, ms, ms, ms, 10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_oneshot_prompt_holds_problem_example_and_instructions(backend):
    msgs = build_messages(PROBLEM, backend)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "MARKER-7" in user  # the problem's full source
    assert "ModelNew" in user and "same arguments as `Model.__init__`" in user
    assert "ONE fenced ```python code block" in user
    # the worked example is in the prompt, and extraction on the prompt finds a complete module
    example = _raw(f"example_{backend}.py.j2")
    assert example in user
    if backend == "cuda":
        assert "load_inline" in user and "Triton" not in msgs[0]["content"]
    else:
        assert "@triton.jit" in user and "Triton" in msgs[0]["content"]
    # the problem comes after the example: a model answering the last block sees the real task
    assert user.index("MARKER-7") > user.index(example)


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="no prompt templates for backend 'hip'"):
        build_messages(PROBLEM, "hip")


@pytest.mark.parametrize("backend", BACKENDS)
def test_worked_examples_parse_and_define_modelnew_like_model(backend):
    problem = ast.parse(_raw("example_problem.py.j2"))
    solution_src = _raw(f"example_{backend}.py.j2")
    solution = ast.parse(solution_src)

    def init_args(tree: ast.Module, cls: str) -> list[str]:
        c = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        f = next(n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        return [a.arg for a in f.args.args]

    assert init_args(problem, "Model") == init_args(solution, "ModelNew")
    assert extract_code(f"```python\n{solution_src}\n```") == solution_src + "\n"


def test_triton_example_matches_its_model_under_the_interpreter(tmp_path):
    """The worked example must be right: run it on CPU with TRITON_INTERPRET=1 against Model."""
    pytest.importorskip("triton")
    (tmp_path / "example_problem.py").write_text(_raw("example_problem.py.j2"))
    (tmp_path / "example_solution.py").write_text(_raw("example_triton.py.j2"))
    script = textwrap.dedent("""\
        import torch, example_problem as p, example_solution as s
        torch.manual_seed(0)
        x = p.get_inputs()
        ref = p.Model(*p.get_init_inputs())(*x)
        out = s.ModelNew(*p.get_init_inputs())(*x)
        assert out.shape == ref.shape, (out.shape, ref.shape)
        assert (ref != 0).any() and (ref == 0).any()   # inputs reach both sides of the ReLU
        print(float((out - ref).abs().max()))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", script], check=False, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) <= 1e-6


def test_trim_middle_keeps_both_ends():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = trim_middle(text, 500)
    assert len(out) <= 500 and out.startswith("HEAD") and out.endswith("TAIL") and "characters cut" in out
    assert trim_middle("short", 500) == "short"


def test_feedback_compile_error_is_quoted_and_trimmed():
    log = ("kernel.cu(12): error: identifier \"blockIdx_x\" is undefined\n"
           + "note: some long template instantiation context\n" * 400
           + "ninja: build stopped: subcommand failed.\n")
    msg = feedback_message(EvalResult(Outcome.COMPILE_ERROR, error=log), max_chars=2000)
    assert len(msg) <= 2000
    assert 'identifier "blockIdx_x" is undefined' in msg  # the first error (head)
    assert "ninja: build stopped" in msg  # the tail
    assert "characters cut" in msg
    assert "```python" in msg and "ModelNew" in msg  # asks for a full module again


def test_feedback_incorrect_names_trial_and_errors():
    res = EvalResult(Outcome.INCORRECT, compiled=True, max_abs_err=0.001434, max_rel_err=0.25,
                     error="output mismatch", extra={"failed_trial": 3, "trials": 5})
    msg = feedback_message(res)
    assert "trial 3 of 5" in msg
    assert "max absolute error: 0.00143" in msg and "max relative error: 0.25" in msg
    assert "output mismatch" in msg
    assert "Fix" in msg


def test_feedback_incorrect_with_the_evaluators_per_trial_list():
    trials = [{"ok": True, "max_abs_err": 1e-7}, {"ok": False, "max_abs_err": 0.02, "detail": "12 elements"},
              {"ok": False}, {"ok": True}, {"ok": True}]
    res = EvalResult(Outcome.INCORRECT, max_abs_err=0.02, error="output 0: 12 elements outside the bound",
                     extra={"trials": trials})
    msg = feedback_message(res)
    assert "first mismatch in correctness trial 2 of 5" in msg
    assert "12 elements outside the bound" in msg and "max absolute error: 0.02" in msg


def test_feedback_incorrect_trial_from_finding():
    res = EvalResult(Outcome.INCORRECT, max_abs_err=2.0,
                     findings=(Finding("verify.allclose", Severity.INFO, data={"trial": 1}),))
    assert "trial 1" in feedback_message(res)


def test_feedback_correct_gives_times_and_speedups_and_asks_for_more():
    res = EvalResult(Outcome.CORRECT, compiled=True, correct=True, candidate=_timing(0.5), eager_ms=1.0,
                     compile_ms=0.75)
    msg = feedback_message(res, backend="triton")
    assert "0.5 ms" in msg and "1 ms" in msg and "0.75 ms" in msg
    assert "speedup 2x" in msg and "speedup 1.5x" in msg
    assert "faster" in msg and "BLOCK" in msg  # the triton template's hints


def test_feedback_cheat_names_tag_and_findings():
    res = EvalResult(Outcome.CHEAT, tag="input-mutation",
                     findings=(Finding("runtime.input-mutation", Severity.CHEAT, "input-mutation",
                                       "forward wrote into input 0"),))
    msg = feedback_message(res)
    assert "input-mutation" in msg and "forward wrote into input 0" in msg


@pytest.mark.parametrize("outcome", list(Outcome))
def test_feedback_exists_for_every_outcome(outcome):
    msg = feedback_message(EvalResult(outcome, error="E" * 50), max_chars=1000)
    assert 0 < len(msg) <= 1000
    assert "ModelNew" in msg


def test_feedback_no_code():
    msg = feedback_message(EvalResult(Outcome.NO_CODE, error="the reply was empty"))
    assert "the reply was empty" in msg and "```python" in msg


def _import_file(path: str, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_example_on_gpu(backend: str, build_dir: str) -> float:
    """Import the worked example's ModelNew on the GPU and return its max abs error against Model."""
    import torch

    paths = {}
    for name, template in (("problem", "example_problem.py.j2"), (backend, f"example_{backend}.py.j2")):
        paths[name] = os.path.join(build_dir, f"example_{name}.py")
        with open(paths[name], "w") as f:  # triton.jit needs the source in a file
            f.write(_raw(template))
    old = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
    try:
        prob = _import_file(paths["problem"], f"kbench_example_problem_{backend}")
        sol = _import_file(paths[backend], f"kbench_example_{backend}")
    finally:
        if old is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = old
    torch.manual_seed(0)
    x = [t.cuda() for t in prob.get_inputs()]
    ref = prob.Model(*prob.get_init_inputs()).cuda()(*x)
    out = sol.ModelNew(*prob.get_init_inputs()).cuda()(*x)
    torch.cuda.synchronize()
    assert out.shape == ref.shape and out.dtype == ref.dtype
    return float((out - ref).abs().max())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_worked_examples_on_gpu(backend, tmp_path):
    """The worked examples compile and match their Model on a CUDA GPU (runnable as a script too)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    assert _run_example_on_gpu(backend, str(tmp_path)) <= 1e-6


if __name__ == "__main__":  # on a GPU machine: PYTHONPATH=. python tests/prompts/test_prompts.py
    import tempfile

    for b in BACKENDS:
        with tempfile.TemporaryDirectory() as d:
            print(b, "max abs error", _run_example_on_gpu(b, d))
