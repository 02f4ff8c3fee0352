"""A candidate's compiled Triton kernels kept for the next evaluation of the same candidate source.

Every candidate process starts with an empty Triton cache of its own (``worker.py``; Triton's host module
planted from :mod:`.tritonseed`), so its first call JIT-compiles every Triton kernel it launches: 0.9 s a
candidate on an H200 host in session 24's cached sweep, on the sweep's chain of large jobs too (42 s over 48
of them). A second run of the same candidates (a cached sweep, a resumed or replayed run) compiled them all
again. With ``KBENCH_TRITON_KEEP=1`` the device worker keeps what a candidate's process left in its Triton
cache, under the build cache (``triton-kept/<key>``), and plants it into the fresh cache of the next process
that evaluates the same source on the same Triton and GPU model: Triton finds its kernels there and loads them.

Nothing is shared between different candidates: the key is the SHA-256 of the candidate's source with Triton's
version and the GPU's name, so a candidate can only ever meet what a process running its own source wrote (which
that source could have done itself, and is judged again in full each time). Each kept file's SHA-256 is recorded
in the folder's ``manifest.json``; a file that no longer matches its record (or a record that changed during the
run) drops the folder, and that candidate compiles afresh. Where candidate processes can write to the build cache
(no Landlock, as on the H200 image), a candidate that knew another's source could rewrite that one's folder and
manifest between runs, as it could a prebuilt extension of :mod:`.builder`'s cache.

Off unless ``KBENCH_TRITON_KEEP=1``: its gain and its hits have not been measured on a GPU yet.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["ENV", "enabled", "kept_key", "plant_kept", "harvest", "MAX_BYTES"]

log = logging.getLogger(__name__)

ENV = "KBENCH_TRITON_KEEP"

#: the most bytes one candidate's kept cache may take (a candidate's process could fill its cache folder)
MAX_BYTES = 64 << 20

_MANIFEST = "manifest.json"


def enabled() -> bool:
    """Whether candidates' Triton caches are kept between evaluations (``KBENCH_TRITON_KEEP``: 0, the default,
    or 1).

    Raises:
        ValueError: the variable is set to something other than an on/off switch.
    """
    from ..envflags import env_switch

    return env_switch(ENV, default=False, expected="expected 1 (keep candidates' compiled Triton kernels for "
                                                   "the next run of the same source) or 0")


def kept_key(source: str, triton_version: str, device_name: str) -> str:
    """The kept folder's name for a candidate's ``source`` (its full text) compiled by ``triton_version`` for a GPU
    named ``device_name``: a SHA-256 in hex."""
    h = hashlib.sha256()
    for part in (source, triton_version, device_name):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _files(root: Path) -> dict[str, Path]:
    """Regular files under ``root`` (no symbolic links), by their path relative to it."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[p.relative_to(root).as_posix()] = p
    return out


def harvest(src: Path, root: Path, key: str, exclude: Iterable[str] = (), max_bytes: int = MAX_BYTES
            ) -> dict[str, str] | None:
    """Keep the files of ``src`` (a finished candidate process's Triton cache) in ``root/key``, unless that folder
    exists already: copied into a new folder with ``manifest.json`` (each file's SHA-256), which is then renamed into
    place (a reader sees all of it or none).

    Args:
        src: the candidate's Triton cache folder.
        root: the folder of kept caches (created where missing).
        key: :func:`kept_key` of the candidate.
        exclude: relative paths not to keep (Triton's host module, planted from :mod:`.tritonseed`).
        max_bytes: past this many bytes in all, nothing is kept.

    Returns:
        The manifest kept (relative path -> SHA-256), or None where nothing was kept (the folder exists, ``src`` has
        no other file, holds too much, or a copy failed).
    """
    dest = root / key
    if dest.exists() or not src.is_dir():
        return None
    skip = set(exclude)
    files = {rel: p for rel, p in _files(src).items() if rel not in skip}
    try:
        if not files or sum(p.stat().st_size for p in files.values()) > max_bytes:
            return None
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".kept-", dir=str(root)))
    except OSError:
        return None
    try:
        manifest = {}
        for rel, p in files.items():
            data = p.read_bytes()
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            manifest[rel] = hashlib.sha256(data).hexdigest()
        (tmp / _MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
        os.rename(tmp, dest)  # fails where another slot kept the same source meanwhile: theirs stays
        return manifest
    except OSError as e:
        if not dest.exists():
            log.info("could not keep a candidate's Triton cache: %s", e)
        shutil.rmtree(tmp, ignore_errors=True)
        return None


def plant_kept(root: Path, key: str, dest: Path, seen: dict[str, Mapping[str, str]] | None = None) -> bool:
    """Copy the kept cache ``root/key`` into ``dest`` (a candidate's fresh Triton cache folder), each file checked
    against the manifest first; the bytes checked are the bytes written. Files already in ``dest`` (Triton's host
    module from the seed) are left as they are.

    Args:
        root, key: the kept folder, as for :func:`harvest`.
        dest: the candidate's Triton cache folder.
        seen: manifests this run kept or planted, by key: a manifest that differs from the one seen earlier in the
            run drops the folder (it was rewritten meanwhile); a new one is added.

    Returns:
        True where every file was planted; False where there is nothing kept, or the folder was dropped (a file
        that does not match, a changed manifest, an unreadable one). On False, files planted by this call are
        removed again.
    """
    folder = root / key
    if not (folder / _MANIFEST).is_file():
        return False
    planted: list[Path] = []
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
        if not isinstance(manifest, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in manifest.items()):
            raise ValueError("its manifest is not a map of files to hashes")
        if seen is not None:
            if seen.get(key, manifest) != manifest:
                raise ValueError("its manifest changed during the run")
            seen[key] = manifest
        for rel, digest in manifest.items():
            parts = Path(rel).parts
            if Path(rel).is_absolute() or ".." in parts or rel == _MANIFEST:
                raise ValueError(f"{rel!r} is not a file of the folder")
            data = (folder / rel).read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"{rel} changed since it was kept")
            target = dest / rel
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(str(target), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            planted.append(target)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        return True
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.warning("a kept Triton cache (%s) was dropped: %s", key[:12], e)
        for p in planted:
            try:
                p.unlink()
            except OSError:
                pass
        shutil.rmtree(folder, ignore_errors=True)
        if seen is not None:
            seen.pop(key, None)
        return False
