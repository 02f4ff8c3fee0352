"""Problem sources: a KernelBench-layout folder, the Hugging Face dataset, JSONL, and the bundled suite.

A problem is a Python file ``level{L}/{id}_{Name}.py`` defining ``class Model(nn.Module)``,
``get_inputs()`` and ``get_init_inputs()`` (KernelBench's contract, PROTOCOLS.md section 1).
Loading never imports problem code: files are checked by parsing them. A malformed file is
reported (:class:`ProblemIssue`) and skipped; it never stops a run.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .core import Problem
from .errors import ConfigError, ProblemLoadError

__all__ = [
    "ProblemIssue",
    "ProblemSet",
    "load_problems",
    "check_problem_source",
    "parse_id_ranges",
    "bundled_problems_dir",
]

log = logging.getLogger(__name__)

_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
_LEVEL_RE = re.compile(r"^level(\d+)$")


@dataclass(frozen=True, slots=True)
class ProblemIssue:
    """A problem file that was skipped, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class ProblemSet:
    """Problems loaded from one source, plus the files that were skipped."""

    problems: tuple[Problem, ...]
    issues: tuple[ProblemIssue, ...]
    source: str

    def counts_by_level(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for p in self.problems:
            out[p.level] = out.get(p.level, 0) + 1
        return dict(sorted(out.items()))

    def get(self, level: int, problem_id: int) -> Problem | None:
        for p in self.problems:
            if p.level == level and p.problem_id == problem_id:
                return p
        return None


def bundled_problems_dir() -> Path:
    """The bundled suite (``problems/`` at the project root, or packaged copy).

    Raises:
        ProblemLoadError: when neither location exists (a broken install).
    """
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "problems", here / "data" / "problems"):
        if (cand / "level1").is_dir():
            return cand
    raise ProblemLoadError("bundled", "the bundled problem suite is missing from this install")


def check_problem_source(code: str, path: str = "<string>") -> None:
    """Check that ``code`` follows the KernelBench problem contract, without running it.

    Raises:
        ProblemLoadError: syntax error, or no ``Model`` class, ``get_inputs`` or ``get_init_inputs``.
    """
    try:
        tree = ast.parse(code, filename=path)
    except SyntaxError as e:
        raise ProblemLoadError(path, f"syntax error at line {e.lineno}: {e.msg}") from None
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    funcs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # names bound by plain assignment also count (get_inputs = lambda: ...)
    for n in tree.body:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    funcs.add(t.id)
    missing = [name for name, ok in (("class Model", "Model" in classes),
                                     ("get_inputs()", "get_inputs" in funcs),
                                     ("get_init_inputs()", "get_init_inputs" in funcs)) if not ok]
    if missing:
        raise ProblemLoadError(path, "missing " + ", ".join(missing))


def parse_id_ranges(spec: str | None) -> set[int] | None:
    """Parse ``"1-10,15,20-22"`` into a set of ids; None or "" means all.

    Raises:
        ConfigError: on anything that is not a comma-separated list of ids or ``a-b`` ranges.
    """
    if spec is None or str(spec).strip() in ("", "all"):
        return None
    ids: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if a > b:
                raise ConfigError(f"bad id range {part!r}: start after end", fix="write ranges as low-high, e.g. 1-10")
            ids.update(range(a, b + 1))
        elif part.isdigit():
            ids.add(int(part))
        else:
            raise ConfigError(f"bad id list {spec!r}", fix="use ids and ranges like 1-10,15")
    return ids


def _select(problems: Iterable[Problem], levels: Iterable[int] | None, ids: set[int] | None) -> list[Problem]:
    lv = set(levels) if levels else None
    out = [p for p in problems if (lv is None or p.level in lv) and (ids is None or p.problem_id in ids)]
    return sorted(out, key=lambda p: (p.level, p.problem_id))


def _load_dir(root: Path, levels: Iterable[int] | None) -> tuple[list[Problem], list[ProblemIssue]]:
    problems: list[Problem] = []
    issues: list[ProblemIssue] = []
    lv = set(levels) if levels else None
    level_dirs = sorted((d for d in root.iterdir() if d.is_dir() and _LEVEL_RE.match(d.name)),
                        key=lambda d: int(_LEVEL_RE.match(d.name).group(1)))  # type: ignore[union-attr]
    if not level_dirs:
        raise ProblemLoadError(str(root), "no level{N}/ folders here (expected KernelBench's layout "
                               "level1/1_Name.py ...)")
    for d in level_dirs:
        level = int(_LEVEL_RE.match(d.name).group(1))  # type: ignore[union-attr]
        if lv is not None and level not in lv:
            continue
        seen: dict[int, Path] = {}
        for f in sorted(d.iterdir()):
            if f.suffix != ".py" or f.name.startswith("_"):
                continue
            m = _FILE_RE.match(f.name)
            if not m:
                issues.append(ProblemIssue(str(f), "file name is not {id}_{Name}.py"))
                continue
            pid, name = int(m.group(1)), m.group(2)
            if pid in seen:
                issues.append(ProblemIssue(str(f), f"duplicate problem id {pid} (also {seen[pid].name})"))
                continue
            try:
                code = f.read_text(encoding="utf-8")
                check_problem_source(code, str(f))
            except ProblemLoadError as e:
                issues.append(ProblemIssue(str(f), e.reason))
                continue
            except (OSError, UnicodeDecodeError) as e:
                issues.append(ProblemIssue(str(f), f"unreadable: {e}"))
                continue
            seen[pid] = f
            problems.append(Problem(level=level, problem_id=pid, name=name, code=code, source=str(f)))
    return problems, issues


def _rows_to_problems(rows: Iterable[dict], origin: str) -> tuple[list[Problem], list[ProblemIssue]]:
    problems: list[Problem] = []
    issues: list[ProblemIssue] = []
    for i, r in enumerate(rows):
        where = f"{origin}#{i}"
        try:
            level, pid, code = int(r["level"]), int(r["problem_id"]), str(r["code"])
            name = str(r.get("name") or f"problem_{pid}")
        except (KeyError, TypeError, ValueError) as e:
            issues.append(ProblemIssue(where, f"row lacks level/problem_id/code ({e})"))
            continue
        m = _FILE_RE.match(name + ".py")  # HF names are "1_Square_matrix..." without .py
        if m and int(m.group(1)) == pid:
            name = m.group(2)
        try:
            check_problem_source(code, where)
        except ProblemLoadError as e:
            issues.append(ProblemIssue(where, e.reason))
            continue
        problems.append(Problem(level=level, problem_id=pid, name=name, code=code, source=origin))
    return problems, issues


def _load_jsonl(path: Path) -> tuple[list[Problem], list[ProblemIssue]]:
    rows, issues = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            issues.append(ProblemIssue(f"{path}:{n}", f"not JSON: {e.msg}"))
    probs, more = _rows_to_problems(rows, str(path))
    return probs, issues + more


def _load_parquet(paths: list[Path]) -> tuple[list[Problem], list[ProblemIssue]]:
    import pandas as pd

    probs, issues = [], []
    for p in paths:
        df = pd.read_parquet(p)
        a, b = _rows_to_problems(df.to_dict("records"), str(p))
        probs += a
        issues += b
    return probs, issues


def _load_hf(spec: str, levels: Iterable[int] | None) -> tuple[list[Problem], list[ProblemIssue]]:
    """``hf:ScalingIntelligence/KernelBench`` through the ``datasets`` package (needs network or its cache)."""
    name = spec[3:] or "ScalingIntelligence/KernelBench"
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("loading from the Hugging Face hub needs the `datasets` package",
                          fix="pip install -e '.[hf]' (the datasets package), or download the parquet files and pass "
                              "their folder") from None
    probs, issues = [], []
    for level in sorted(set(levels) if levels else {1, 2, 3, 4}):
        try:
            ds = datasets.load_dataset(name, split=f"level_{level}")
        except Exception as e:  # network, missing split: report and go on
            issues.append(ProblemIssue(f"hf:{name}/level_{level}", f"could not load: {e}"))
            continue
        a, b = _rows_to_problems(ds, f"hf:{name}")
        probs += a
        issues += b
    return probs, issues


def load_problems(
    source: str | os.PathLike[str] | None = None,
    *,
    levels: Iterable[int] | None = None,
    ids: str | set[int] | None = None,
) -> ProblemSet:
    """Load problems and select some by level and id.

    Args:
        source: one of
            - None or ``"bundled"``: kbench's own suite (``problems/``);
            - a folder in KernelBench's layout (``level1/1_Name.py`` ...), e.g. a KernelBench checkout's
              ``KernelBench/`` folder or ``../shared/kernelbench``;
            - a ``.jsonl`` file of ``{"level", "problem_id", "name", "code"}`` objects;
            - a ``.parquet`` file or a folder of them (the HF dataset's files);
            - ``"hf:ScalingIntelligence/KernelBench"`` (needs the ``datasets`` package).
        levels: levels to keep (None = all).
        ids: problem ids to keep, as a set or a spec like ``"1-10,15"`` (None = all).

    Returns:
        The selected problems sorted by (level, problem_id), and the skipped files with reasons.

    Raises:
        ProblemLoadError: the source does not exist or is not a problem source.
        ConfigError: a bad ``ids`` spec.
    """
    id_set = parse_id_ranges(ids) if isinstance(ids, str) or ids is None else set(ids)
    if source is None or str(source) == "bundled":
        root = bundled_problems_dir()
        probs, issues = _load_dir(root, levels)
        probs = [Problem(p.level, p.problem_id, p.name, p.code, "bundled:" + Path(p.source).relative_to(root).as_posix(),
                         p.code_sha256) for p in probs]
        label = "bundled"
    elif str(source).startswith("hf:"):
        probs, issues = _load_hf(str(source), levels)
        label = str(source)
    else:
        path = Path(source).expanduser()
        label = str(path)
        if not path.exists():
            raise ProblemLoadError(str(path), "no such file or folder")
        if path.is_file() and path.suffix == ".jsonl":
            probs, issues = _load_jsonl(path)
        elif path.is_file() and path.suffix == ".parquet":
            probs, issues = _load_parquet([path])
        elif path.is_dir() and any(path.glob("*.parquet")) and not any(path.glob("level*")):
            probs, issues = _load_parquet(sorted(path.glob("*.parquet")))
        elif path.is_dir():
            if not any(_LEVEL_RE.match(d.name) for d in path.iterdir() if d.is_dir()) and (path / "KernelBench").is_dir():
                path = path / "KernelBench"  # a KernelBench repository checkout
            probs, issues = _load_dir(path, levels)
        else:
            raise ProblemLoadError(str(path), "not a problem folder, .jsonl or .parquet file")
    for iss in issues:
        log.warning("skipped problem %s: %s", iss.path, iss.reason)
    return ProblemSet(problems=tuple(_select(probs, levels, id_set)), issues=tuple(issues), source=label)
