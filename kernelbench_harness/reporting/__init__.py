"""Reports and the static leaderboard: JSON data first, then jinja2 templates with inline SVG charts.

- :func:`build_run_data` / :func:`write_run_report`: one run's self-contained HTML report.
- :func:`build_leaderboard_data` / :func:`write_leaderboard`: the static site (``data/*.json`` + pages).
- :func:`export_run`: ``samples.jsonl``, ``run.json`` and KernelBench-style ``eval_results.json``.
"""

from __future__ import annotations

from .data import (
    LEGEND,
    SCHEMA_VERSION,
    build_leaderboard_data,
    build_problem_data,
    build_run_data,
    error_notes,
    hardware_label,
    load_reported,
    timed_on_cpu,
)
from .highlight import highlight_source
from .render import default_report_dir, export_run, render_run_report, write_leaderboard, write_run_report

__all__ = [
    "LEGEND",
    "SCHEMA_VERSION",
    "build_leaderboard_data",
    "build_problem_data",
    "build_run_data",
    "default_report_dir",
    "error_notes",
    "export_run",
    "hardware_label",
    "highlight_source",
    "load_reported",
    "render_run_report",
    "timed_on_cpu",
    "write_leaderboard",
    "write_run_report",
]
