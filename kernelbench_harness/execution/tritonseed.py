"""A seed for each candidate process's private Triton cache: Triton's own host module, built once.

Every candidate process gets an empty ``TRITON_CACHE_DIR`` of its own (``worker.py``), so its first
Triton call builds Triton's ``cuda_utils`` host module with the host's C compiler before it compiles
the candidate's kernel. The module does not depend on the candidate: it is Triton's ``driver.c``,
built for this Python and this Triton. The device worker builds it once, in a helper process that
runs no candidate code (:func:`make_seed`), records a SHA-256 of every file, and copies the files
into each candidate's fresh cache before the process starts (:func:`plant_seed`). A file that no
longer matches its hash (a candidate's process that could write outside its folder changed it) ends
the seeding for the rest of the run: nothing a candidate wrote reaches another candidate.

Nothing a candidate compiles is shared: its kernels and their launchers are compiled in its own
cache, as before. Only CUDA devices have a seed (elsewhere Triton runs interpreted and builds nothing).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["TritonSeed", "make_seed", "plant_seed"]

log = logging.getLogger(__name__)

#: what the helper runs: Triton's active driver's host utilities (built into the cache on a miss)
_HELPER = "import triton\ntriton.runtime.driver.active.utils\n"


@dataclass
class TritonSeed:
    """A built seed: ``root`` (a Triton cache folder) and the SHA-256 of each file under it, by path
    relative to ``root``. ``spoiled`` is set once a file no longer matches (no more planting)."""

    root: Path
    digests: dict[str, str]
    spoiled: bool = False


def make_seed(root: Path, env: Mapping[str, str], timeout_s: float = 120.0) -> TritonSeed | None:
    """Build Triton's host module into ``root`` (a new folder) in a helper process.

    Args:
        root: the seed's folder; created, and removed again where the build fails.
        env: the helper's environment (the candidates' clean one); ``HOME``, ``TMPDIR`` and
            ``TRITON_CACHE_DIR`` are set to folders under ``root``.
        timeout_s: seconds the helper may take (a cold C compile takes about one).

    Returns:
        The seed, or None where the helper failed (no GPU, no C compiler, Triton missing, timeout):
        candidates then build the module themselves, as without a seed. Never raises for those.
    """
    cache = root / "cache"
    home = root / "home"
    try:
        cache.mkdir(parents=True, exist_ok=False)
        home.mkdir()
        run_env = dict(env)
        run_env.update({"HOME": str(home), "TMPDIR": str(home), "TRITON_CACHE_DIR": str(cache),
                        "XDG_CACHE_HOME": str(home)})
        out = subprocess.run([sys.executable, "-c", _HELPER], env=run_env, cwd=str(home), capture_output=True,
                             text=True, errors="replace", timeout=timeout_s)
        if out.returncode != 0:
            log.info("no Triton cache seed: the helper failed: %s", out.stderr.strip()[-300:])
            shutil.rmtree(root, ignore_errors=True)
            return None
        digests: dict[str, str] = {}
        for path in sorted(cache.rglob("*")):
            if path.is_file() and not path.is_symlink():
                digests[path.relative_to(cache).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
        if not digests:
            shutil.rmtree(root, ignore_errors=True)
            return None
        return TritonSeed(cache, digests)
    except Exception as e:  # noqa: BLE001 - no seed is never a failure of the candidate's job
        log.info("no Triton cache seed: %s: %s", type(e).__name__, e)
        shutil.rmtree(root, ignore_errors=True)
        return None


def plant_seed(seed: TritonSeed | None, dest: Path) -> bool:
    """Copy ``seed``'s files into ``dest`` (a candidate's empty Triton cache folder), each checked
    against its recorded hash first; the bytes checked are the bytes written.

    Returns:
        True where every file was planted; False where there is no seed, it is spoiled, a seed file no
        longer matches or cannot be read (the seed is then spoiled for good), or ``dest`` cannot take a
        file (one is already there, say). On False, files planted by this call are removed again.
    """
    if seed is None or seed.spoiled:
        return False
    planted: list[Path] = []
    try:
        for rel, digest in seed.digests.items():
            try:
                data = (seed.root / rel).read_bytes()
                if hashlib.sha256(data).hexdigest() != digest:
                    raise ValueError(f"{rel} changed since it was built")
            except (OSError, ValueError) as e:
                log.warning("Triton cache seed dropped for the rest of the run: %s", e)
                seed.spoiled = True
                raise
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(str(target), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            planted.append(target)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        return True
    except (OSError, ValueError):
        for p in planted:
            try:
                p.unlink()
            except OSError:
                pass
        return False
