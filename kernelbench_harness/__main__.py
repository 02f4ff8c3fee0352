"""``python -m kernelbench_harness``: the same as the ``kbench`` command."""

from .cli import main

main()
