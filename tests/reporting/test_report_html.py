"""The per-run report, the export files and the leaderboard site, built from the synthetic store."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from kernelbench_harness.cli import cli
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.metrics import level_weighted
from kernelbench_harness.reporting import export_run, load_reported


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.resources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])  # type: ignore[arg-type]
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])  # type: ignore[arg-type]
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.resources.append(a["src"])  # type: ignore[arg-type]
        if tag == "link" and a.get("href") and a.get("rel") != "icon":
            self.resources.append(a["href"])  # type: ignore[arg-type]


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def check_links(root: Path) -> int:
    """Every relative link of every page under ``root`` points at an existing file (and anchor)."""
    checked = 0
    for page in root.rglob("*.html"):
        parsed = _parse(page)
        assert parsed.resources == [], f"{page} loads external resources: {parsed.resources}"
        for href in parsed.hrefs:
            u = urlsplit(href)
            if u.scheme in ("http", "https"):
                continue
            target = (page.parent / u.path).resolve() if u.path else page
            assert target.exists(), f"{page}: broken link {href}"
            if u.fragment and target.suffix == ".html":
                assert u.fragment in _parse(target).ids, f"{page}: missing anchor {href}"
            checked += 1
    return checked


def test_run_report_pages(run_report: Path) -> None:
    root = run_report.parent
    html = run_report.read_text(encoding="utf-8")
    assert sorted(p.name for p in (root / "problems").glob("*.html")) == [
        "L1_1.html",
        "L1_2.html",
        "L1_3.html",
        "L1_4.html",
        "L2_1.html",
        "L2_2.html",
        "L2_3.html",
    ]
    assert check_links(root) > 20
    # self-contained: CSS and JS inline, charts as inline SVG
    assert "<style>" in html and "<script>" in html and html.count("<svg") >= 6
    assert "over correct candidates" in html and "failure = 1x" in html
    for label in (
        "fast<sub>0</sub>",
        "fast<sub>0.5</sub>",
        "fast<sub>0.8</sub>",
        "fast<sub>1</sub>",
        "fast<sub>1.5</sub>",
        "fast<sub>2</sub>",
    ):
        assert label in html
    assert "cheat(input-mutation)" in html and "timing_invalid(side-stream)" in html
    assert 'class="badge b-review"' in html  # the 12x speedup
    assert "Degenerate problems" in html and "L2/3" in html
    assert "3,700" in html  # alpha's input tokens
    data = json.loads((root / "data" / "run.json").read_text())
    assert data["schema_version"] == 1 and data["degenerate"] == ["L2/3"]
    alpha = {g["group"]: g for g in data["metrics"] if g["model"] == "alpha"}
    assert alpha["L1"]["correct_rate"]["value"] == 0.5  # L1/1 and L1/2 (turn 1) of four
    assert alpha["L2"]["problems"] == 2  # L2/3 is degenerate: out of the scope
    assert alpha["L2"]["geomean_speedup_eager"]["value"] == pytest.approx(12.0)
    assert alpha["weighted"]["weights"] == {"1": 4.0, "2": 2.0}
    rows = {(r["key"], r["model"]): r for r in data["problems"]}
    assert rows[("L1/2", "alpha")]["best_turn"] == 1 and rows[("L1/2", "alpha")]["samples"] == 1
    assert rows[("L2/1", "alpha")]["review"] is True
    assert "degenerate" in rows[("L2/3", "alpha")]["flags"]


def test_problem_page_shows_turns_evidence_and_transcript(run_report: Path) -> None:
    page = (run_report.parent / "problems" / "L1_2.html").read_text(encoding="utf-8")
    assert "turn 0" in page and "turn 1" in page and "best turn" in page
    assert "Write ModelNew for &lt;problem&gt; &amp; make it fast." in page  # transcript, escaped
    assert "incorrect: max abs error 1.4e-3" in page
    # a check that ended without a judgement is named (not the ones that were judged)
    assert "Checks without a judgement" in page and "kernel_ablation" in page and "out of device memory" in page
    assert "timed_output" not in page
    assert "<script>alert(1)" not in page  # candidate source is escaped
    assert 'class="hl"' in page  # highlighted
    cheat = (run_report.parent / "problems" / "L1_3.html").read_text(encoding="utf-8")
    assert "runtime.input-mutation" in cheat and "forward wrote into its input x" in cheat
    missing = (run_report.parent / "problems" / "L1_4.html").read_text(encoding="utf-8")
    assert "beta" in missing and "alpha" not in re.sub(r"<[^>]+>", "", missing.split("<h2", 1)[0])


def test_export(synth_store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    files = export_run(synth_store, "synth-a", tmp_path)
    assert {f.relative_to(tmp_path).as_posix() for f in files} == {
        "samples.jsonl",
        "run.json",
        "eval_results.json",
        "level1/eval_results.json",
        "level2/eval_results.json",
    }
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 11
    for d in lines:  # replayable: the replay adapter's keys are there
        assert {
            "level",
            "problem_id",
            "sample_id",
            "turn",
            "model",
            "outcome",
            "tag",
            "candidate_ms",
            "eager_ms",
            "compile_ms",
            "speedup_eager",
            "speedup_compile",
            "code",
        } <= set(d)
    l12 = [d for d in lines if (d["level"], d["problem_id"], d["model"]) == (1, 2, "alpha")]
    assert [(d["turn"], d["outcome"], d["best"]) for d in l12] == [
        (0, "incorrect", False),
        (1, "correct", True),
    ]
    assert l12[0]["input_tokens"] == 1000 and isinstance(l12[0]["input_tokens"], int)
    ev = json.loads((tmp_path / "level1" / "eval_results.json").read_text())
    assert sorted(ev) == ["1", "2", "3", "4"]
    by_model = {e["metadata"]["model"]: e for e in ev["2"]}
    assert by_model["alpha"]["correctness"] and by_model["alpha"]["runtime"] == 2.0
    assert (
        by_model["alpha"]["metadata"]["turn"] == 1 and by_model["alpha"]["runtime_stats"]["num_trials"] == 20
    )
    [cheat] = ev["3"]
    assert cheat["correctness"] is False and cheat["runtime"] == -1.0
    top = json.loads((tmp_path / "eval_results.json").read_text())
    assert sorted(top) == ["level1", "level2"] and top["level1"] == ev
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["schema_version"] == 1 and len(run["scope"]) == 7 and run["run"]["run_name"] == "synth-a"


def test_leaderboard_site(site: Path) -> None:
    board = json.loads((site / "data" / "leaderboard.json").read_text())
    reported = json.loads((site / "data" / "reported.json").read_text())
    assert board["schema_version"] == 1 and reported["schema_version"] == 1
    assert {(g["protocol"], g["hardware"]) for g in board["groups"]} == {
        ("kbench", "NVIDIA H200"),
        ("cuda-agent", "NVIDIA H100 80GB HBM3"),
    }
    assert {r["model"] for r in board["rows"]} == {"alpha", "beta", "gamma"}
    gamma = next(r for r in board["rows"] if r["model"] == "gamma" and r["group"] == "all")
    assert gamma["report"] == "runs/synth-b/index.html" and gamma["status"] == "interrupted"
    assert gamma["correct_rate"]["value"] == pytest.approx(2 / 3)
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "reported, not measured here" in html and "NVIDIA H20" in html and "arXiv:2602.24286" in html
    for f in ("hardware", "protocol", "precision", "group"):
        assert f'data-filter="{f}"' in html
    assert (site / "runs" / "synth-a" / "index.html").exists() and (
        site / "data" / "runs" / "synth-b.json"
    ).exists()
    assert 'href="../../index.html"' in (site / "runs" / "synth-a" / "index.html").read_text(encoding="utf-8")
    assert check_links(site) > 40


def test_reported_figures_are_consistent() -> None:
    """The packaged CUDA Agent Table 1 rows agree with the level-weighted definition in metrics."""
    [src] = load_reported()["sources"]
    assert (
        src["hardware"] == "NVIDIA H20"
        and src["protocol"] == "cuda-agent"
        and "2602.24286" in src["citation"]
    )
    rows = {(r["model"], r["group"]): r for r in src["rows"]}
    assert len(rows) == 18
    w = {1: 100, 2: 100, 3: 50}
    for model in ("CUDA Agent", "Gemini 3 Pro", "Claude Opus 4.5"):
        for metric in ("geomean_speedup_eager", "geomean_speedup_compile"):
            per = {lv: rows[(model, f"L{lv}")][metric] for lv in (1, 2, 3)}
            assert level_weighted(per, w, geometric=True) == pytest.approx(
                rows[(model, "weighted")][metric], abs=0.011
            )
        per = {lv: rows[(model, f"L{lv}")]["correct_rate"] for lv in (1, 2, 3)}
        assert level_weighted(per, w, geometric=False) == pytest.approx(
            rows[(model, "weighted")]["correct_rate"], abs=0.001
        )


def test_cli_commands(synth_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner()
    res = r.invoke(cli, ["runs", "list", "--db", synth_db])
    assert res.exit_code == 0 and "synth-a" in res.output and "synth-b" in res.output
    res = r.invoke(cli, ["report", "synth-b", "--db", synth_db, "--resamples", "50"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "reports" / "synth-b" / "index.html").exists()
    res = r.invoke(cli, ["show", "synth-a", "L1/2", "--db", synth_db, "--model", "alpha"])
    assert (
        res.exit_code == 0 and "incorrect" in res.output and "fixed" in res.output and "turn 1" in res.output
    )
    res = r.invoke(cli, ["show", "synth-a", "1/4", "--db", synth_db])
    assert res.exit_code == 0 and "beta" in res.output
    res = r.invoke(cli, ["export", "synth-a", "--db", synth_db, "--out", "exp"])
    assert res.exit_code == 0 and (tmp_path / "exp" / "samples.jsonl").exists()
    res = r.invoke(
        cli, ["leaderboard", "--db", synth_db, "--out", "site", "--resamples", "50", "--run", "synth-b"]
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "site" / "runs" / "synth-b" / "index.html").exists()
    assert not (tmp_path / "site" / "runs" / "synth-a").exists()
    # a leaderboard built from another store is not written over without --replace
    lb = json.loads((tmp_path / "site" / "data" / "leaderboard.json").read_text())
    for row in lb["rows"]:
        row["run_name"] = "published-run"
    (tmp_path / "site" / "data" / "leaderboard.json").write_text(json.dumps(lb))
    res = r.invoke(cli, ["leaderboard", "--db", synth_db, "--out", "site", "--resamples", "50"],
                   standalone_mode=False)
    assert isinstance(res.exception, ConfigError) and "published-run" in str(res.exception)
    assert "--replace" in res.exception.fix
    res = r.invoke(cli, ["leaderboard", "--db", synth_db, "--out", "site", "--resamples", "50", "--replace"])
    assert res.exit_code == 0, res.output
    # nor by one that leaves runs out with --run
    res = r.invoke(cli, ["leaderboard", "--db", synth_db, "--out", "site", "--resamples", "50", "--run", "synth-b"],
                   standalone_mode=False)
    assert isinstance(res.exception, ConfigError) and "synth-a" in str(res.exception)
    flags = tmp_path / "flags.json"
    flags.write_text(json.dumps({"L1/1": ["degenerate"]}))
    res = r.invoke(cli, ["report", "synth-b", "--db", synth_db, "--out", "rb", "--flags", str(flags)])
    assert res.exit_code == 0
    assert json.loads((tmp_path / "rb" / "data" / "run.json").read_text())["degenerate"] == ["L1/1"]
    res = r.invoke(cli, ["show", "synth-a", "level-one", "--db", synth_db])
    assert res.exit_code != 0


def test_a_gpu_only_site_shows_no_cpu_banner_and_explains_errors(site: Path) -> None:
    html = (site / "index.html").read_text(encoding="utf-8")
    assert 'class="banner banner-cpu"' not in html
    assert "CPU-timed" not in re.sub(r"<style>.*?</style>", "", html, flags=re.DOTALL)
    page = (site / "runs" / "synth-a" / "problems" / "L1_2.html").read_text(encoding="utf-8")
    assert 'id="error-notes"' in page and "fp64-bound" in page  # the incorrect turn's errors are explained
    other = (site / "runs" / "synth-b" / "problems" / "L1_2.html").read_text(encoding="utf-8")
    assert "judge allclose" in other and "atol=0.01, rtol=0.01" in other  # cuda-agent's own tolerances
