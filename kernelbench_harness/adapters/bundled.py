"""The offline ``bundled`` adapter: serves kbench's own example solutions for the bundled problem suite.

No network, no API key and no GPU are needed: ``kbench run --model bundled`` evaluates the solutions
under ``problems/solutions/`` against the bundled problems, which is how a bare machine runs the
main job end to end. Solutions are files ``problems/solutions/level{L}/{id}_{Name}.{variant}.py``
where ``variant`` is ``triton`` (``@triton.jit``; runs on a CPU under ``TRITON_INTERPRET=1``),
``cuda`` (CUDA C++ through ``load_inline``) or ``cpp`` (C++ through ``load_inline`` with
``cpp_sources`` only).

The adapter answers only for the bundled problems themselves: a problem matches when its level,
problem_id *and* ``code_sha256`` equal those of a bundled file, so a KernelBench problem that happens
to share an id gets ``Generation(code=None, error=...)`` instead of a wrong solution.

Options (``-O key=value``):
    variant: ``auto`` (default: ``cuda`` when the target device is a GPU and a CUDA solution exists,
        else ``triton``), ``triton``, ``cuda``, ``cpp``, or ``all`` (one sample per variant that can
        run on the target device, sample_id 0..n-1 in the order triton, cuda, cpp).
    device: ``cpu`` or ``cuda`` (``cuda:N`` also accepted): the device the candidates will run on.
        When omitted, CUDA is looked for without initialising it in this process (see
        :func:`cuda_device_present`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import Problem
from ..errors import ConfigError
from ..problems import bundled_problems_dir, load_problems
from .base import Generation, GenerationRequest, ModelAdapter, SampleSpec, refuse_unknown_options

__all__ = [
    "VARIANTS",
    "VARIANT_CHOICES",
    "BundledAdapter",
    "BundledSolution",
    "bundled_solutions_dir",
    "cuda_device_present",
    "find_bundled_solutions",
]

log = logging.getLogger(__name__)

VARIANTS: tuple[str, ...] = ("triton", "cuda", "cpp")
"""Solution variants, in the fixed order that ``variant=all`` numbers its samples."""

VARIANT_CHOICES: tuple[str, ...] = ("auto", *VARIANTS, "all")

_SOLUTION_RE = re.compile(r"^(\d+)_(.+)\.(" + "|".join(VARIANTS) + r")\.py$")
_LEVEL_RE = re.compile(r"^level(\d+)$")


@dataclass(frozen=True, slots=True)
class BundledSolution:
    """One example solution file of the bundled suite.

    Attributes:
        level, problem_id: the problem it solves.
        name: the problem's name (file stem without id and variant).
        variant: ``triton``, ``cuda`` or ``cpp``.
        path: the solution file.
    """

    level: int
    problem_id: int
    name: str
    variant: str
    path: Path

    def read(self) -> str:
        """The solution's Python source (defines ``ModelNew``)."""
        return self.path.read_text(encoding="utf-8")


def bundled_solutions_dir() -> Path:
    """The folder of example solutions, ``problems/solutions``.

    Raises:
        ProblemLoadError: the bundled suite is missing from this install.
    """
    return bundled_problems_dir() / "solutions"


def find_bundled_solutions(root: Path | None = None) -> dict[tuple[int, int], dict[str, BundledSolution]]:
    """Index the solution files under ``root`` (default :func:`bundled_solutions_dir`).

    Returns:
        ``{(level, problem_id): {variant: BundledSolution}}``. Files whose names do not follow
        ``{id}_{Name}.{variant}.py`` are skipped with a warning.
    """
    root = bundled_solutions_dir() if root is None else root
    out: dict[tuple[int, int], dict[str, BundledSolution]] = {}
    if not root.is_dir():
        return out
    for level_dir in sorted(root.iterdir()):
        m = _LEVEL_RE.match(level_dir.name)
        if not (level_dir.is_dir() and m):
            continue
        level = int(m.group(1))
        for f in sorted(level_dir.iterdir()):
            if f.suffix != ".py" or f.name.startswith("_"):
                continue
            fm = _SOLUTION_RE.match(f.name)
            if not fm:
                log.warning("ignored bundled solution file %s: name is not {id}_{Name}.{variant}.py", f)
                continue
            sol = BundledSolution(level, int(fm.group(1)), fm.group(2), fm.group(3), f)
            out.setdefault((level, sol.problem_id), {})[sol.variant] = sol
    return out


def cuda_device_present() -> bool:
    """Whether a CUDA GPU is visible, asked without creating a CUDA context in this process.

    The plain ``torch.cuda.is_available()`` calls ``cudaGetDeviceCount``, which initialises the driver
    and makes CUDA unusable in children forked later; with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` PyTorch
    asks NVML instead (its documented fork-safe check), so the variable is set for the duration of the
    call. A PyTorch built without CUDA answers False at once.
    """
    import torch

    if not torch.backends.cuda.is_built():
        return False
    key = "PYTORCH_NVML_BASED_CUDA_CHECK"
    old = os.environ.get(key)
    os.environ[key] = "1"
    try:
        return bool(torch.cuda.is_available())
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


class BundledAdapter(ModelAdapter):
    """Serves the example solution(s) of each bundled problem; answers nothing else.

    Args:
        options: ``{"variant": ..., "device": ...}`` as described in the module docstring; values may be
            strings (from ``-O key=value``).

    Raises:
        ConfigError: an unknown option (the message names the two it takes), ``variant`` or ``device``.
    """

    name = "bundled"
    is_llm = False
    takes_model_args = False
    max_concurrency = 64

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        refuse_unknown_options("bundled", opts, {"variant": f"-O variant=<{'|'.join(VARIANT_CHOICES)}>",
                                                 "device": "-O device=cpu|cuda"})
        self.variant = str(opts.get("variant") or "auto").strip().lower()
        if self.variant not in VARIANT_CHOICES:
            raise ConfigError(f"unknown bundled variant {self.variant!r}",
                              fix=f"use -O variant=<{'|'.join(VARIANT_CHOICES)}>")
        device = opts.get("device")
        self._device: str | None = None
        if device is not None and str(device).strip():
            d = str(device).strip().lower()
            if d == "cpu":
                self._device = "cpu"
            elif d == "cuda" or d.startswith("cuda:"):
                self._device = "cuda"
            else:
                raise ConfigError(f"unknown device {device!r} for the bundled adapter", fix="use -O device=cpu|cuda")
        suite = load_problems("bundled")
        self._suite: dict[tuple[int, int], Problem] = {(p.level, p.problem_id): p for p in suite.problems}
        self._solutions = find_bundled_solutions()
        for key, sols in self._solutions.items():
            p = self._suite.get(key)
            if p is None or any(s.name != p.name for s in sols.values()):
                log.warning("bundled solution(s) %s match no bundled problem L%d/%d",
                            ", ".join(s.path.name for s in sols.values()), *key)

    @property
    def device(self) -> str:
        """``"cuda"`` or ``"cpu"``: where the served candidates are meant to run."""
        if self._device is None:
            self._device = "cuda" if cuda_device_present() else "cpu"
        return self._device

    def solutions_for(self, problem: Problem) -> dict[str, BundledSolution]:
        """The solutions of ``problem`` by variant, or ``{}`` when it is not a bundled problem
        (different level/id, or same level/id but different source code)."""
        ref = self._suite.get((problem.level, problem.problem_id))
        if ref is None or ref.code_sha256 != problem.code_sha256:
            return {}
        return {v: s for v, s in self._solutions.get((problem.level, problem.problem_id), {}).items()
                if s.name == ref.name}

    def variants_for(self, problem: Problem) -> tuple[str, ...]:
        """The variants served for ``problem`` under this adapter's ``variant`` option, in sample order.

        ``cuda`` solutions run only on a GPU; ``triton`` runs on both (under the interpreter on a CPU);
        ``cpp`` runs its C++ on the host on both (a GPU input is copied to the host and back).
        """
        have = self.solutions_for(problem)
        if self.variant == "all":
            return tuple(v for v in VARIANTS if v in have and (v != "cuda" or self.device == "cuda"))
        if self.variant == "auto":
            if self.device == "cuda" and "cuda" in have:
                return ("cuda",)
            return ("triton",) if "triton" in have else ()
        return (self.variant,) if self.variant in have else ()

    def plan(self, problems: Sequence[Problem], samples: int) -> list[SampleSpec]:
        """Samples to evaluate.

        A bundled problem gets ``range(samples)`` samples of its chosen variant, or, with
        ``variant=all``, one sample per variant (sample_id 0..n-1 in the order triton, cuda, cpp).
        A bundled problem without the asked-for variant is left out (logged). Any other problem is
        planned as usual; :meth:`generate` then answers it with an error, so it shows in the results.
        """
        specs: list[SampleSpec] = []
        for p in problems:
            if not self.solutions_for(p):
                specs.extend(SampleSpec(p, self.name, s) for s in range(max(samples, 1)))
                continue
            variants = self.variants_for(p)
            if not variants:
                log.info("bundled: %s has no %s solution for device %s; not planned", p.key, self.variant,
                         self.device)
            elif self.variant == "all":
                specs.extend(SampleSpec(p, self.name, i) for i in range(len(variants)))
            else:
                specs.extend(SampleSpec(p, self.name, s) for s in range(max(samples, 1)))
        return specs

    def variant_for(self, spec: SampleSpec) -> str | None:
        """The variant that :meth:`generate` serves for ``spec``, or None when there is none."""
        variants = self.variants_for(spec.problem)
        if not variants:
            return None
        if self.variant == "all":
            return variants[spec.sample_id] if 0 <= spec.sample_id < len(variants) else None
        return variants[0]

    async def generate(self, request: GenerationRequest) -> Generation:
        """Return the solution source as both reply text and code; never raises for a missing solution."""
        p = request.spec.problem
        have = self.solutions_for(p)
        if not have:
            return Generation(text="", code=None, model=self.name, error_kind="fatal",
                              error=f"no bundled solution for {p.key} ({p.name}): the bundled adapter only "
                                    "answers kbench's own bundled problems")
        variant = self.variant_for(request.spec)
        if variant is None:
            return Generation(text="", code=None, model=self.name, error_kind="fatal",
                              error=f"no bundled solution for {p.key} ({p.name}) as variant {self.variant!r}, "
                                    f"sample {request.spec.sample_id} on {self.device} "
                                    f"(has: {', '.join(sorted(have))})")
        try:
            source = have[variant].read()
        except OSError as e:
            return Generation(text="", code=None, model=self.name, error_kind="fatal",
                              error=f"cannot read bundled solution {have[variant].path}: {e}")
        return Generation(text=source, code=source, model=self.name)
