"""Issue 4, what must be shown, item 3: a candidate that goes for the machine's secrets, the results
store and the network gets nothing, and the attempt is on record.

The evaluation runs in a fresh interpreter (``sandbox_probe.py``) whose initial environment holds an
OpenAI / Anthropic key, a Hugging Face token and a database URL with a password, like a ``kbench run``
started from a shell with keys exported. The candidate tries, at import: the keys through its own
environment and through every ancestor's ``/proc/<pid>/environ``; writing a results database (SQLite,
outside its private folder); TCP to PostgreSQL's port and to a listener the parent opened; the
PostgreSQL server's Unix socket and an abstract Unix socket the parent opened; signalling its parent
and grandparent; and writing outside its private folder. It prints what it saw (the evaluation log
keeps it), and the static scan records the socket use.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from kernelbench_harness.core import EvalResult, Outcome
from kernelbench_harness.execution.sandbox import landlock_abi

TESTS = Path(__file__).resolve().parents[1]
MARKER = f"kbtest{uuid.uuid4().hex[:12]}"
SECRETS = {
    "OPENAI_API_KEY": f"sk-{MARKER}-openai",
    "ANTHROPIC_API_KEY": f"sk-ant-{MARKER}",
    "HF_TOKEN": f"hf_{MARKER}",
    "DATABASE_URL": f"postgresql://kbench:{MARKER}@127.0.0.1:5432/kbench",
}
PG_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"

_PROBE = r'''
import json, os, signal, socket, sqlite3
import torch
import torch.nn as nn
import triton
import triton.language as tl

SEEN = {}


def attempt(name, fn):
    try:
        SEEN[name] = "ok: " + str(fn())[:60]
    except Exception as e:
        SEEN[name] = f"denied: {type(e).__name__}: {e}"[:90]


def ancestors_environ():
    leaks, pid = [], os.getppid()
    while pid > 1:
        try:
            if b"@MARKER@" in open(f"/proc/{pid}/environ", "rb").read():
                leaks.append(pid)
        except OSError:
            pass
        pid = int([l for l in open(f"/proc/{pid}/status") if l.startswith("PPid:")][0].split()[1])
    if leaks:
        return f"secrets in the environment of {leaks}"
    raise PermissionError("no ancestor environment readable with a secret")


def write_db():
    con = sqlite3.connect("@DB@")
    con.execute("INSERT INTO results VALUES ('pwned')")
    con.commit()
    return "inserted"


def connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(path)
    return "connected"


def grandparent():
    return int([l for l in open(f"/proc/{os.getppid()}/status") if l.startswith("PPid:")][0].split()[1])


SEEN["env"] = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "DATABASE_URL")}
SEEN["env_marker"] = any("@MARKER@" in v for v in os.environ.values())
attempt("ancestor_environ", ancestors_environ)
attempt("db_write", write_db)
attempt("db_open_rw", lambda: open("@DB@", "r+b").close())
attempt("tcp_postgres", lambda: socket.create_connection(("127.0.0.1", 5432), timeout=2))
attempt("tcp_listener", lambda: socket.create_connection(("127.0.0.1", @TCP_PORT@), timeout=2))
attempt("unix_postgres", lambda: connect_unix("@PG_SOCKET@"))
attempt("abstract_unix", lambda: connect_unix("\0@ABSTRACT@"))
attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
attempt("signal_grandparent", lambda: os.kill(grandparent(), signal.SIGWINCH))
attempt("write_tmp", lambda: open("/tmp/@MARKER@.txt", "w").write("x"))
attempt("write_beside", lambda: open("../@MARKER@.txt", "w").write("x"))
attempt("write_repo", lambda: open("@REPO@/@MARKER@.txt", "w").write("x"))
attempt("write_private", lambda: open("tmp/ok.txt", "w").write("x"))
print("PROBE " + json.dumps(SEEN), flush=True)


@triton.jit
def affine_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        out = torch.empty_like(x)
        affine_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.alpha, BLOCK=1024)
        return out
'''


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Evaluate the probing candidate once, in a child interpreter that holds the secrets."""
    tmp = tmp_path_factory.mktemp("sandbox")
    db = tmp / "results" / "kbench.db"
    db.parent.mkdir()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE results (verdict TEXT)")
    con.execute("INSERT INTO results VALUES ('correct')")
    con.commit()
    con.close()
    digest = _digest(db)
    abstract = f"kbtest-{uuid.uuid4().hex}"
    src = (_PROBE.replace("@MARKER@", MARKER).replace("@DB@", str(db)).replace("@PG_SOCKET@", PG_SOCKET)
           .replace("@ABSTRACT@", abstract).replace("@REPO@", str(TESTS.parent)))
    cand = tmp / "probe_candidate.py"
    cand.write_text(src)
    env = {**os.environ, **SECRETS, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    cfg = {"candidate": str(cand), "scratch": str(tmp / "scratch"), "db": str(db), "abstract": abstract}
    out = subprocess.run([sys.executable, str(TESTS / "execution" / "sandbox_probe.py"), json.dumps(cfg)],
                         env=env, capture_output=True, text=True, timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    res = EvalResult.from_dict(data["result"])
    lines = [ln for ln in res.log.splitlines() if ln.startswith("PROBE ")]
    assert lines, f"the candidate's report is missing from the log: {res.log[-2000:]!r} {res.error!r}"
    return {"res": res, "seen": json.loads(lines[-1][6:]), "arrived": data["arrived"], "layers": data["layers"],
            "db": db, "db_digest": digest, "tmp": tmp}


def _layers(probe: dict[str, Any]) -> set[str]:
    """The sandbox layers that took effect in the candidate process, as recorded with the result."""
    sb = probe["res"].extra.get("sandbox") or {}
    out = set(str(sb.get("landlock", "")).split())
    if sb.get("netns") == "ok":
        out.add("netns")
    return out


def _require(probe: dict[str, Any], *layers: str) -> None:
    missing = [x for x in layers if x not in _layers(probe)]
    if missing:
        pytest.skip(f"sandbox layer(s) {missing} not available on this machine ({_layers(probe)})")


def test_no_credentials_in_the_candidate_environment(probe: dict[str, Any]) -> None:
    seen = probe["seen"]
    assert seen["env"] == dict.fromkeys(SECRETS)
    assert seen["env_marker"] is False


def test_results_database_is_read_only_to_the_candidate(probe: dict[str, Any]) -> None:
    _require(probe, "fs-write-confined")
    seen = probe["seen"]
    assert seen["db_write"].startswith("denied"), seen["db_write"]
    assert seen["db_open_rw"].startswith("denied: PermissionError"), seen["db_open_rw"]
    assert _digest(probe["db"]) == probe["db_digest"]
    con = sqlite3.connect(probe["db"])
    assert con.execute("SELECT verdict FROM results").fetchall() == [("correct",)]
    con.close()


def test_no_network(probe: dict[str, Any]) -> None:
    if not _layers(probe) & {"netns", "tcp-denied"}:
        pytest.skip("neither a network namespace nor Landlock TCP rules on this machine")
    seen = probe["seen"]
    assert seen["tcp_postgres"].startswith("denied"), seen["tcp_postgres"]
    assert seen["tcp_listener"].startswith("denied"), seen["tcp_listener"]
    if "netns" in _layers(probe):  # abstract Unix sockets belong to the network namespace
        assert seen["abstract_unix"].startswith("denied"), seen["abstract_unix"]
        assert probe["arrived"] == []  # nothing reached the parent's listeners
    else:
        assert "tcp" not in probe["arrived"]


def test_no_signals_or_writes_outside_the_private_folder(probe: dict[str, Any]) -> None:
    _require(probe, "fs-write-confined", "signal-scoped")
    seen = probe["seen"]
    assert seen["signal_parent"].startswith("denied: PermissionError"), seen["signal_parent"]
    assert seen["signal_grandparent"].startswith("denied: PermissionError"), seen["signal_grandparent"]
    for where in ("write_tmp", "write_beside", "write_repo"):
        assert seen[where].startswith("denied: PermissionError"), (where, seen[where])
    assert seen["write_private"].startswith("ok"), seen["write_private"]
    assert not (probe["tmp"] / "scratch").joinpath(f"{MARKER}.txt").exists()
    assert not Path(f"/tmp/{MARKER}.txt").exists() and not (TESTS.parent / f"{MARKER}.txt").exists()


def test_attempts_are_recorded(probe: dict[str, Any]) -> None:
    res: EvalResult = probe["res"]
    assert res.outcome is Outcome.CHEAT and res.tag == "network"  # the static scan saw the socket import
    assert {f.check for f in res.findings} >= {"static.network"}
    sandbox = res.extra["sandbox"]
    chosen = {"netns" if k == "new_netns" else k for k, on in probe["layers"].items() if on and k in ("new_netns",
                                                                                                      "landlock")}
    assert {"setsid", *chosen} <= set(sandbox)  # every layer the evaluator chose reports what it did
    if landlock_abi() >= 6 and probe["layers"].get("landlock_scope"):
        assert {"fs-write-confined", "tcp-denied", "signal-scoped"} <= _layers(probe)
    assert "PROBE " in res.log  # what the candidate saw is kept with the result


def test_ancestor_environments_are_unreadable(probe: dict[str, Any]) -> None:
    seen = probe["seen"]
    assert seen["ancestor_environ"].startswith("denied"), seen["ancestor_environ"]


def test_unix_sockets_of_the_host_are_unreachable(probe: dict[str, Any]) -> None:
    if not Path(PG_SOCKET).exists():
        pytest.skip("no PostgreSQL socket on this machine")
    seen = probe["seen"]
    assert seen["unix_postgres"].startswith("denied"), seen["unix_postgres"]
