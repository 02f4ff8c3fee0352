"""Run by ``test_sandbox.py`` in a fresh interpreter whose *initial* environment holds credentials
(``/proc/<pid>/environ`` shows them, as it would for ``kbench run`` started from a shell with keys
exported). It opens the things a candidate must not reach, evaluates the probing candidate given on
the command line, and prints one JSON line: the result, and what arrived at the listeners.

Usage: ``python sandbox_probe.py CONFIG_JSON`` with keys ``candidate``, ``scratch``, ``db``, ``abstract``.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from execution.evalkit import AFFINE, evaluate, make_evaluator


def main() -> None:
    cfg = json.loads(sys.argv[1])
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + cfg["abstract"])
    abstract.listen(8)
    abstract.setblocking(False)
    source = Path(cfg["candidate"]).read_text().replace("@TCP_PORT@", str(tcp.getsockname()[1]))
    ev = make_evaluator(Path(cfg["scratch"]))
    try:
        res = evaluate(ev, source, AFFINE, timeout_s=30)
        layers = dict(ev.layers)
    finally:
        ev.close()
    arrived = []
    for name, srv in (("tcp", tcp), ("abstract", abstract)):
        try:
            srv.accept()
            arrived.append(name)
        except BlockingIOError:
            pass
    print(json.dumps({"result": res.to_dict(), "arrived": arrived, "layers": layers}))


if __name__ == "__main__":
    main()
