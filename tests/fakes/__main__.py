"""Run a fake OpenAI-compatible policy server by hand.

From the repository root: ``PYTHONPATH=tests python -m fakes --port 8000 --script replies.json``,
where ``replies.json`` holds a list of reply texts (served by turn) or an object mapping markers
in the last user message to replies.
"""

from __future__ import annotations

import argparse
import json
import time

from .providers import FakeOpenAIServer


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m fakes")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", default="fake-policy")
    ap.add_argument("--script", help="JSON file: list of replies by turn, or {marker: reply}")
    args = ap.parse_args()
    script = None
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            script = json.load(f)
    srv = FakeOpenAIServer(script, model=args.model).start(args.port)
    print(f"fake OpenAI-compatible server at {srv.base_url} (model {args.model}); Ctrl-C stops it")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
