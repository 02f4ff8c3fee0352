"""The Triton cache seed (execution/tritonseed.py): built by a helper that runs no candidate code, planted
file by file after a hash check, and dropped for good once a file changed."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from kernelbench_harness.execution import tritonseed
from kernelbench_harness.execution.tritonseed import TritonSeed, make_seed, plant_seed


def _seed(tmp_path: Path) -> TritonSeed:
    root = tmp_path / "seed"
    (root / "abc123").mkdir(parents=True)
    files = {"abc123/cuda_utils.so": b"\x7fELF host module", "abc123/__grp__cuda_utils.json": b"{}"}
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    return TritonSeed(root, {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()})


def test_plant_copies_every_file_as_a_private_copy(tmp_path: Path) -> None:
    seed = _seed(tmp_path)
    dest = tmp_path / "job" / "cache" / "triton"
    assert plant_seed(seed, dest)
    assert (dest / "abc123" / "cuda_utils.so").read_bytes() == b"\x7fELF host module"
    assert (dest / "abc123" / "__grp__cuda_utils.json").read_bytes() == b"{}"
    # a candidate writing into its copy does not reach the seed (no hard link, no symlink)
    (dest / "abc123" / "cuda_utils.so").write_bytes(b"tampered")
    assert (seed.root / "abc123" / "cuda_utils.so").read_bytes() == b"\x7fELF host module"
    assert not (dest / "abc123" / "cuda_utils.so").is_symlink()
    dest2 = tmp_path / "job2"
    assert plant_seed(seed, dest2)
    assert (dest2 / "abc123" / "cuda_utils.so").read_bytes() == b"\x7fELF host module"


def test_a_changed_seed_file_spoils_the_seed_for_good(tmp_path: Path) -> None:
    seed = _seed(tmp_path)
    (seed.root / "abc123" / "cuda_utils.so").write_bytes(b"written by a candidate")
    dest = tmp_path / "job"
    assert not plant_seed(seed, dest)
    assert seed.spoiled
    assert not dest.exists() or not any(p.is_file() for p in dest.rglob("*"))
    # restoring the file does not bring the seed back: something could write there
    (seed.root / "abc123" / "cuda_utils.so").write_bytes(b"\x7fELF host module")
    assert not plant_seed(seed, tmp_path / "job2")
    assert not (tmp_path / "job2").exists()


def test_no_seed_plants_nothing(tmp_path: Path) -> None:
    assert not plant_seed(None, tmp_path / "job")
    assert not (tmp_path / "job").exists()


def test_plant_never_overwrites_what_is_there(tmp_path: Path) -> None:
    seed = _seed(tmp_path)
    dest = tmp_path / "job"
    (dest / "abc123").mkdir(parents=True)
    (dest / "abc123" / "__grp__cuda_utils.json").write_bytes(b"already")
    assert not plant_seed(seed, dest)
    assert (dest / "abc123" / "__grp__cuda_utils.json").read_bytes() == b"already"
    assert not (dest / "abc123" / "cuda_utils.so").exists()  # what this call planted is gone again
    assert not seed.spoiled  # the candidate's folder, not the seed: the next job is seeded
    assert plant_seed(seed, tmp_path / "job2")


def test_make_seed_records_what_the_helper_built(tmp_path: Path, monkeypatch) -> None:
    # a stand-in helper that writes a cache entry where Triton would (TRITON_CACHE_DIR), in a real subprocess
    monkeypatch.setattr(tritonseed, "_HELPER", "import os, pathlib\n"
                        "d = pathlib.Path(os.environ['TRITON_CACHE_DIR']) / 'k1'\n"
                        "d.mkdir(parents=True)\n(d / 'cuda_utils.so').write_bytes(b'built')\n")
    seed = make_seed(tmp_path / "seed", dict(os.environ))
    assert seed is not None
    assert seed.digests == {"k1/cuda_utils.so": hashlib.sha256(b"built").hexdigest()}
    dest = tmp_path / "job"
    assert plant_seed(seed, dest)
    assert (dest / "k1" / "cuda_utils.so").read_bytes() == b"built"


def test_make_seed_returns_none_when_the_helper_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tritonseed, "_HELPER", "raise SystemExit('no GPU here')\n")
    assert make_seed(tmp_path / "seed", dict(os.environ)) is None
    assert not (tmp_path / "seed").exists()
    # a helper that builds nothing is no seed either
    monkeypatch.setattr(tritonseed, "_HELPER", "pass\n")
    assert make_seed(tmp_path / "seed2", dict(os.environ)) is None


def test_the_real_helper_on_a_machine_without_a_gpu_gives_no_seed(tmp_path: Path) -> None:
    # CI has no GPU: Triton has no active driver there, and the evaluation goes on without a seed
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    assert make_seed(tmp_path / "seed", env, timeout_s=120) is None


def test_a_helper_printing_bytes_that_are_not_utf8_still_gives_a_seed(tmp_path: Path, monkeypatch) -> None:
    # a compiler message in another locale must not fail the candidate's job (make_seed never raises)
    monkeypatch.setattr(tritonseed, "_HELPER", "import os, pathlib, sys\n"
                        "sys.stderr.buffer.write(b'avertissement: \\xe9\\xe8\\n')\n"
                        "d = pathlib.Path(os.environ['TRITON_CACHE_DIR']) / 'k1'\n"
                        "d.mkdir(parents=True)\n(d / 'cuda_utils.so').write_bytes(b'built')\n")
    seed = make_seed(tmp_path / "seed", dict(os.environ))
    assert seed is not None and list(seed.digests) == ["k1/cuda_utils.so"]
