"""kbench: a trustworthy evaluation harness and static leaderboard for LLM-written GPU kernels.

The public library API; the command line lives in :mod:`kernelbench_harness.cli`.
"""

from __future__ import annotations

from .core import Backend, Candidate, EvalResult, Finding, Outcome, Problem, Severity, TimingStats
from .errors import ConfigError, KbenchError, PrerequisiteError, ProblemLoadError, StoreError
from .problems import ProblemSet, load_problems
from .protocols import Protocol, get_protocol

__version__ = "0.1.0"

__all__ = [
    "Backend", "Candidate", "EvalResult", "Finding", "Outcome", "Problem", "Severity", "TimingStats",
    "ConfigError", "KbenchError", "PrerequisiteError", "ProblemLoadError", "StoreError",
    "ProblemSet", "load_problems", "Protocol", "get_protocol", "__version__",
]
