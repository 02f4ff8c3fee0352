"""A candidate's Triton cache kept for the next evaluation of the same source (KBENCH_TRITON_KEEP=1): kept once,
planted hash-checked into a fresh cache, keyed so that another source never meets it, dropped when a file or the
manifest changed; the device worker records what happened (extra.triton_kept)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelbench_harness.execution import tritonkeep
from kernelbench_harness.execution.tritonkeep import harvest, kept_key, plant_kept


def _cache(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


KERNEL = {"AbC123/add_kernel.cubin": b"\x7fELF cubin", "AbC123/add_kernel.json": b'{"name": "add_kernel"}',
          "AbC123/__grp__add_kernel.json": b"{}"}
SEED = {"Seed99/cuda_utils.so": b"host module"}


def test_the_key_is_the_source_tritons_version_and_the_gpu():
    k = kept_key("src", "3.6.0", "NVIDIA H200")
    assert len(k) == 64 and k == kept_key("src", "3.6.0", "NVIDIA H200")
    assert len({k, kept_key("src ", "3.6.0", "NVIDIA H200"), kept_key("src", "3.6.1", "NVIDIA H200"),
                kept_key("src", "3.6.0", "NVIDIA H100"), kept_key("sr", "c3.6.0", "NVIDIA H200")}) == 5


def test_a_cache_is_kept_once_without_the_seed_and_planted_into_a_fresh_one(tmp_path):
    src = _cache(tmp_path / "job1", {**KERNEL, **SEED})
    root = tmp_path / "kept"
    key = kept_key("candidate source", "3.6.0", "H200")
    manifest = harvest(src, root, key, exclude=SEED)
    assert manifest is not None and sorted(manifest) == sorted(KERNEL)
    assert not (root / key / "Seed99").exists()
    assert harvest(src, root, key) is None  # kept already: the first stays
    dest = _cache(tmp_path / "job2", SEED)  # a fresh cache holds the seed's module only
    seen: dict = {}
    assert plant_kept(root, key, dest, seen)
    for rel, data in {**KERNEL, **SEED}.items():
        assert (dest / rel).read_bytes() == data
    assert seen[key] == manifest
    assert not plant_kept(root, kept_key("another source", "3.6.0", "H200"), tmp_path / "job3")  # nothing kept


def test_nothing_is_kept_from_an_empty_or_oversized_cache(tmp_path):
    root = tmp_path / "kept"
    assert harvest(_cache(tmp_path / "seedonly", SEED), root, "k1", exclude=SEED) is None
    assert harvest(_cache(tmp_path / "big", {"X/huge.cubin": b"0" * 2048}), root, "k2", max_bytes=1024) is None
    assert harvest(tmp_path / "missing", root, "k3") is None
    assert not root.exists() or not any(p.name in ("k1", "k2", "k3") for p in root.iterdir())


@pytest.mark.parametrize("spoil", ["file", "manifest-path", "manifest-json", "changed-during-run"])
def test_a_kept_cache_that_changed_is_dropped_and_nothing_of_it_planted(tmp_path, spoil):
    root = tmp_path / "kept"
    key = "k" * 64
    manifest = harvest(_cache(tmp_path / "job1", KERNEL), root, key)
    seen = {key: manifest}
    folder = root / key
    if spoil == "file":  # another process rewrote a kept binary
        (folder / "AbC123/add_kernel.cubin").write_bytes(b"\x7fELF evil")
    elif spoil == "manifest-path":  # a manifest naming a file outside the folder
        (folder / "manifest.json").write_text(json.dumps({**manifest, "../../../etc/passwd": "0" * 64}))
    elif spoil == "manifest-json":
        (folder / "manifest.json").write_text("[not a manifest")
    else:  # file and manifest rewritten together after this run kept them
        (folder / "AbC123/add_kernel.cubin").write_bytes(b"\x7fELF evil")
        import hashlib

        (folder / "manifest.json").write_text(json.dumps(
            {**manifest, "AbC123/add_kernel.cubin": hashlib.sha256(b"\x7fELF evil").hexdigest()}))
    dest = tmp_path / "job2"
    dest.mkdir()
    assert not plant_kept(root, key, dest, seen)
    assert not any(p.is_file() for p in dest.rglob("*"))  # nothing planted
    assert not folder.exists() and key not in seen  # dropped: the next candidate compiles afresh


def test_the_device_worker_keeps_a_jobs_cache_and_records_what_happened(tmp_path, monkeypatch):
    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.execution.device import DeviceEvaluator

    monkeypatch.setenv(tritonkeep.ENV, "1")
    assert tritonkeep.enabled()
    ev = SimpleNamespace(_job_kept=("k" * 64, False), _triton_seed=SimpleNamespace(digests=SEED), _kept_seen={},
                         _kept_root=lambda: tmp_path / "kept")
    jobdir = tmp_path / "cand_1"
    _cache(jobdir / "cache" / "triton", {**KERNEL, **SEED})
    res = DeviceEvaluator._keep_triton(ev, jobdir, EvalResult(Outcome.CORRECT))
    assert res.extra["triton_kept"] == "kept" and ev._job_kept is None and "k" * 64 in ev._kept_seen
    assert sorted(json.loads((tmp_path / "kept" / ("k" * 64) / "manifest.json").read_text())) == sorted(KERNEL)
    ev._job_kept = ("k" * 64, True)  # the next job of the same source was planted from it: nothing kept again
    assert DeviceEvaluator._keep_triton(ev, jobdir, EvalResult(Outcome.CORRECT)).extra["triton_kept"] == "planted"
    ev._job_kept = None  # KBENCH_TRITON_KEEP unset: nothing recorded
    assert "triton_kept" not in DeviceEvaluator._keep_triton(ev, jobdir, EvalResult(Outcome.CORRECT)).extra
    monkeypatch.setenv(tritonkeep.ENV, "2")
    with pytest.raises(ValueError, match="KBENCH_TRITON_KEEP"):
        tritonkeep.enabled()
