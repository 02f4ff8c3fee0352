"""``python early_child.py MODULE FUNCTION FOLDER OUT``: calls ``MODULE.FUNCTION(Path(FOLDER))`` and pickles
``("ok", value)`` or ``("error", traceback)`` into OUT (see :func:`early.in_child`)."""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import traceback
from pathlib import Path


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the job's finally blocks end what it started (early._end_group)


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    module, name, folder, out = sys.argv[1:5]
    tests = str(Path(__file__).resolve().parent)
    if tests not in sys.path:  # as tests/conftest.py does for the session
        sys.path.insert(0, tests)
    try:
        fn = importlib.import_module(module)
        for part in name.split("."):
            fn = getattr(fn, part)
        payload: tuple[str, object] = ("ok", fn(Path(folder)))
        data = pickle.dumps(payload)
    except BaseException as e:  # noqa: BLE001 - everything goes back to the test that asked
        data = pickle.dumps(("error", "".join(traceback.format_exception(e))))
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, out)


if __name__ == "__main__":  # the device slots are started with multiprocessing's spawn: it imports this again
    main()
