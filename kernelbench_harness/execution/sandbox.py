"""Confinement of candidate processes: environment, limits, network, filesystem writes.

Applied in a freshly forked candidate process before any candidate code is imported:

- environment: rebuilt from an allow-list; anything that looks like a credential is dropped
  (:func:`clean_environment`), and HOME / TMPDIR / build and cache folders point into the
  candidate's private folder;
- resource limits: CPU seconds, file size, core dumps, and (CPU devices only: CUDA reserves huge
  virtual ranges) address space; resident memory is also watched from outside;
- network: a new, empty network namespace (``unshare(CLONE_NEWNET)``) where the OS allows it, and
  Landlock TCP bind/connect denial (ABI >= 4);
- filesystem: Landlock (ABI >= 1) allows writes only beneath the private folder and to ``/dev``'s character
  devices (:func:`dev_write_paths`), so the results store, the reports, the source tree and the run's scratch
  (other candidates' input sets, in ``/dev/shm``) stay read-only to the candidate;
  Landlock also stops the candidate from signalling or ptracing processes outside it (ABI >= 6);
- its own process group (``setsid``), so a timeout kills nvcc, ninja and any thread or child.

Each layer reports whether it took effect; the result records it (``sandbox`` in the evidence).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import re
import resource
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["SandboxConfig", "clean_environment", "apply_sandbox", "looks_secret", "landlock_abi", "LAYER_SETS",
           "site_write_dirs", "dev_write_paths", "pinned_layers", "LAYER_NAMES",
           "make_undumpable"]

log = logging.getLogger(__name__)

_SECRET_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT|SIGNATURE|DSN|"
                        r"DATABASE_URL|_URL_WITH|WEBHOOK)", re.IGNORECASE)
_ALLOWED_PREFIXES = ("CUDA_", "NVIDIA_", "TORCH_", "TRITON_", "LC_", "CUBLAS_", "CUDNN_", "NCCL_", "OMP_",
                     "MKL_", "PYTORCH_", "KBENCH_CHILD_")
_ALLOWED_NAMES = {"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "LD_LIBRARY_PATH", "CC", "CXX", "CUDAHOSTCXX",
                  "MAX_JOBS", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHASHSEED", "CUDA_HOME", "CUDA_PATH",
                  "TORCH_CUDA_ARCH_LIST", "TRITON_INTERPRET", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",
                  "TORCH_EXTENSIONS_DIR", "CPATH", "LIBRARY_PATH", "KBENCH_SLIM_HEADERS", "KBENCH_PCH"}


def looks_secret(name: str, value: str = "") -> bool:
    """True when an environment variable's name or value looks like a credential.

    Values are checked for common key shapes (``sk-...``, long base64/hex tokens in ``*_URL``s with
    passwords, ``Bearer ...``).
    """
    if _SECRET_RE.search(name):
        return True
    v = value.strip()
    if re.match(r"^(sk|pk|rk|ghp|gho|xox[abp]|AKIA|AIza|hf_)[-_A-Za-z0-9]{8,}", v):
        return True
    if re.search(r"://[^/\s:@]+:[^/\s@]+@", v):  # URL with embedded password
        return True
    return v.lower().startswith("bearer ")


def clean_environment(env: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a candidate process gets: allow-listed names only, no credentials.

    Args:
        env: the parent's environment.
        extra: variables to set afterwards (private folders, device selection); never filtered.
    """
    out: dict[str, str] = {}
    for k, v in env.items():
        if looks_secret(k, v):
            continue
        if k in _ALLOWED_NAMES or k.startswith(_ALLOWED_PREFIXES):
            out[k] = v
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    out["PYTHONNOUSERSITE"] = "1"
    if extra:
        out.update(extra)
    return out


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Limits and folders for one candidate process.

    Attributes:
        private_dir: the only folder tree the candidate may write (plus ``/dev``'s character devices:
            :func:`dev_write_paths`).
        extra_write_dirs: more writable trees (e.g. a build folder; ``/proc/self`` is the process's
            own /proc folder).
        cpu_time_s: RLIMIT_CPU (seconds of CPU, all threads); 0 = unlimited.
        file_size_bytes: RLIMIT_FSIZE; 0 = unlimited.
        address_space_bytes: RLIMIT_AS, applied only when ``limit_address_space`` (CPU devices).
        new_netns: try an empty network namespace.
        landlock: try Landlock filesystem rules; landlock_tcp: also deny TCP bind/connect (ABI >= 4);
            landlock_scope: also stop signals to processes outside the sandbox (ABI >= 6).
        drop_caps: drop every capability (a root candidate could otherwise read the trusted
            processes' memory and environment through /proc or ptrace).
        seccomp_unix: refuse new ``AF_UNIX`` sockets (seccomp): neither a network namespace nor
            Landlock stops a connection to a host service's socket file, such as PostgreSQL's
            ``/var/run/postgresql/.s.PGSQL.5432`` (the results store, when it is PostgreSQL).
    """

    private_dir: str
    extra_write_dirs: tuple[str, ...] = ()
    cpu_time_s: int = 0
    file_size_bytes: int = 0
    address_space_bytes: int = 0
    limit_address_space: bool = False
    new_netns: bool = True
    landlock: bool = True
    landlock_tcp: bool = True
    landlock_scope: bool = True
    drop_caps: bool = True
    seccomp_unix: bool = True
    allow_network: bool = False
    applied: dict[str, str] = field(default_factory=dict)


# --- Landlock (linux/landlock.h) ---------------------------------------------------------------
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_FS_WRITE = (1 << 1)  # WRITE_FILE
_FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 4, 1 << 5
_FS_MAKE = sum(1 << b for b in range(6, 13))  # MAKE_CHAR..MAKE_SYM
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND, _NET_CONNECT = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS = 38
_O_PATH = getattr(os, "O_PATH", 0o10000000)
_CLONE_NEWNET = 0x40000000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel (0 when unavailable)."""
    try:
        r = _libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except Exception:
        return 0
    return max(0, int(r))


#: /dev entries a candidate may not write: the shared-memory folders, where the run's scratch (other slots' and
#: other candidates' input sets, ``/dev/shm/kbench``) lives. A candidate that could write there replaced the input
#: files a later candidate of another model read, and that honest candidate was judged incorrect (stop 39's attack).
_DEV_DENIED = ("shm", "mqueue")


def dev_write_paths() -> list[str]:
    """The ``/dev`` files a candidate process may write: the character devices directly in ``/dev`` and one folder
    down (``/dev/null``, the GPU's ``/dev/nvidia*`` and ``/dev/nvidia-caps/*``, which CUDA opens for writing;
    ``/dev/dri/*``), outside :data:`_DEV_DENIED`. No folder: a rule on a folder let a candidate create files there
    that outlived it (``/dev/cpu``, ``/dev/net``: a header another candidate's shared build then included, stop 39's
    second attack). No block device (a disk a root process may open). Links are left out. A machine whose GPU stack
    writes elsewhere (``/dev/shm`` for CUDA MPS) adds it with ``$KBENCH_SANDBOX_WRITE_DIRS``, at the cost of that
    protection."""
    out: list[str] = []

    def chars(folder: str, depth: int) -> None:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        for name in names:
            if folder == "/dev" and name in _DEV_DENIED:
                continue
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISCHR(mode):
                out.append(path)
            elif stat.S_ISDIR(mode) and depth > 0:
                chars(path, depth - 1)

    chars("/dev", 1)
    return out


def _landlock(write_dirs: Iterable[str], deny_tcp: bool, scope: bool = True,
              dev_paths: Iterable[str] = ()) -> str:
    libc = _libc()
    abi = landlock_abi()
    if abi < 1:
        return "unavailable"
    fs = _FS_WRITE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    net = (_NET_BIND | _NET_CONNECT) if (abi >= 4 and deny_tcp) else 0
    scoped = _SCOPE_SIGNAL if (abi >= 6 and scope) else 0
    # struct landlock_ruleset_attr { u64 handled_access_fs; u64 handled_access_net; u64 scoped; }
    if abi >= 6:
        attr = struct.pack("QQQ", fs, net, scoped)
    elif abi >= 4:
        attr = struct.pack("QQ", fs, net)
    else:
        attr = struct.pack("Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    rs = libc.syscall(_SYS_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if rs < 0:
        return f"create failed errno={ctypes.get_errno()}"
    file_rights = fs & (_FS_WRITE | _FS_TRUNCATE)  # the rights a rule on a file (not a folder) may carry
    try:
        for d, required in [(d, True) for d in write_dirs] + [(d, False) for d in dev_paths]:
            try:
                fd = os.open(d, _O_PATH | os.O_CLOEXEC | (0 if required else os.O_NOFOLLOW))
            except OSError:
                continue
            try:
                rights = fs if stat.S_ISDIR(os.fstat(fd).st_mode) else file_rights
                # struct landlock_path_beneath_attr { u64 allowed_access; s32 parent_fd; } __packed
                rule = struct.pack("=Qi", rights, fd)
                rb = ctypes.create_string_buffer(rule, len(rule))
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(rs), ctypes.c_int(1), rb, ctypes.c_uint32(0)) < 0:
                    if not required:  # a /dev entry the kernel will not take a rule for: it stays unwritable
                        continue
                    return f"add_rule failed for {d} errno={ctypes.get_errno()}"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no_new_privs failed errno={ctypes.get_errno()}"
        if libc.syscall(_SYS_RESTRICT, ctypes.c_int(rs), ctypes.c_uint32(0)) < 0:
            return f"restrict failed errno={ctypes.get_errno()}"
    finally:
        os.close(rs)
    parts = [f"abi{abi}", "fs-write-confined"]
    if net:
        parts.append("tcp-denied")
    if scoped:
        parts.append("signal-scoped")
    return " ".join(parts)


def apply_sandbox(cfg: SandboxConfig) -> dict[str, str]:
    """Confine the calling process (call it in the candidate process, before importing its code).

    Returns:
        What each layer did, e.g. ``{"setsid": "ok", "netns": "ok", "landlock": "abi7 ...", ...}``.
        A layer the OS refuses is reported, not raised: the result records the sandbox's strength.
    """
    applied: dict[str, str] = {}
    try:
        os.setsid()
        applied["setsid"] = "ok"
    except OSError as e:  # already a group leader
        applied["setsid"] = f"skipped ({e.strerror})"
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cfg.cpu_time_s > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cfg.cpu_time_s, cfg.cpu_time_s + 5))
        applied["rlimit_cpu_s"] = str(cfg.cpu_time_s)
    if cfg.file_size_bytes > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (cfg.file_size_bytes, cfg.file_size_bytes))
        applied["rlimit_fsize"] = str(cfg.file_size_bytes)
    if cfg.limit_address_space and cfg.address_space_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cfg.address_space_bytes, cfg.address_space_bytes))
        applied["rlimit_as"] = str(cfg.address_space_bytes)
    if cfg.new_netns and not cfg.allow_network:
        libc = _libc()
        if libc.unshare(ctypes.c_int(_CLONE_NEWNET)) == 0:
            applied["netns"] = "ok"
        else:
            applied["netns"] = f"refused errno={ctypes.get_errno()}"
    if cfg.landlock:
        dirs = [cfg.private_dir, *(f"/proc/{os.getpid()}" if d == "/proc/self" else d for d in cfg.extra_write_dirs)]
        try:
            applied["landlock"] = _landlock(dirs, deny_tcp=cfg.landlock_tcp and not cfg.allow_network,
                                            scope=cfg.landlock_scope, dev_paths=dev_write_paths())
        except Exception as e:  # never let a sandbox layer crash the worker
            applied["landlock"] = f"error {e}"
    if cfg.drop_caps:
        applied["caps"] = _drop_capabilities()
    if cfg.seccomp_unix:
        applied["seccomp"] = _deny_unix_sockets()
    Path(cfg.private_dir).mkdir(parents=True, exist_ok=True)
    return applied


#: what a CUDA candidate may write besides its private folder by default: its own /proc entry. On the H200 machines
#: (driver 580, session 41) CUDA does not initialise under Landlock without it, and with it every case of
#: ``scripts/gpu/exploits.py`` came out as expected with Landlock on (``docs/gpu/2026-12-05-s41/``). A process may
#: already write its own memory, so the grant costs little.
CUDA_WRITE_DIRS = ("/proc/self",)


def site_write_dirs(device_type: str = "cpu") -> tuple[str, ...]:
    """Folders a candidate process may write besides its private folder, read on the trusted side and passed as
    ``SandboxConfig.extra_write_dirs``: ``$KBENCH_SANDBOX_WRITE_DIRS`` when set (comma- or colon-separated;
    ``/proc/self`` means the candidate process's own /proc folder; set but empty means none), else
    :data:`CUDA_WRITE_DIRS` for ``device_type`` ``"cuda"`` and none for a CPU. ``scripts/gpu/landlock_diag.py``
    finds which folder a machine's driver needs when Landlock stops the device from initialising.

    Raises:
        ValueError: an entry that is not an absolute path to an existing folder (a typo would otherwise leave the
            folder unwritable without a word, and the device might then fail to start under Landlock).
    """
    raw = os.environ.get("KBENCH_SANDBOX_WRITE_DIRS")
    if raw is None:
        return CUDA_WRITE_DIRS if device_type == "cuda" else ()
    dirs = tuple(d.strip() for d in raw.replace(":", ",").split(",") if d.strip())
    bad = [d for d in dirs if d != "/proc/self" and not (os.path.isabs(d) and os.path.isdir(d))]
    if bad:
        raise ValueError(f"KBENCH_SANDBOX_WRITE_DIRS={raw!r}: {', '.join(repr(d) for d in bad)} is not an absolute "
                         "path to an existing folder")
    return dirs


def _deny_unix_sockets() -> str:
    """Install a seccomp filter that makes ``socket(AF_UNIX, ...)`` fail with EACCES (x86-64 only;
    sockets that already exist, such as the channel to the trusted side, keep working)."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return "skipped (not x86-64)"
    ld, jeq, ret = 0x20, 0x15, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    prog = [
        (ld, 0, 0, 4),               # A = arch
        (jeq, 0, 5, 0xC000003E),     # not x86-64: allow
        (ld, 0, 0, 0),               # A = syscall number
        (jeq, 0, 3, 41),             # not socket(2): allow
        (ld, 0, 0, 16),              # A = low 32 bits of args[0] (the address family)
        (jeq, 0, 1, 1),              # not AF_UNIX: allow
        (ret, 0, 0, deny),
        (ret, 0, 0, allow),
    ]
    raw = b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(filt))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    libc = _libc()
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.prctl(22, 2, fbuf, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"refused errno={ctypes.get_errno()}"
    return "unix sockets denied"


_PR_CAPBSET_DROP = 24
_CAP_LAST = 63


def make_undumpable() -> None:
    """Mark the calling (trusted) process non-dumpable: its /proc files, environment included, are then
    unreadable to same-user processes that lack CAP_SYS_PTRACE (every candidate)."""
    try:
        _libc().prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except Exception:
        pass


def die_with_parent() -> None:
    """Ask Linux to SIGKILL the calling process when the thread that started it ends (``PR_SET_PDEATHSIG``): a
    killed runner leaves no device slot or background sizing child behind. Where ``prctl`` is missing, nothing."""
    import signal

    try:
        _libc().prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _drop_capabilities() -> str:
    """Drop every capability (bounding set, then effective/permitted/inheritable).

    A root candidate otherwise keeps CAP_SYS_PTRACE and friends, which let it read
    ``/proc/<ancestor>/environ`` (the runner's API keys) or ptrace the trusted processes.
    """
    libc = _libc()
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for cap in range(_CAP_LAST + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last cap: ignored
    # struct __user_cap_header_struct { u32 version; int pid; }; _LINUX_CAPABILITY_VERSION_3 = 0x20080522
    hdr = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0), 8)
    data = ctypes.create_string_buffer(bytes(24), 24)  # two __user_cap_data_struct, all zero
    if libc.syscall(126, hdr, data) != 0:  # SYS_capset (x86_64)
        return f"capset failed errno={ctypes.get_errno()}"
    return "all dropped"


#: Sandbox layer sets from strongest to weakest. A device worker starts a probe process with each in
#: turn and keeps the first under which the device still initialises (some GPU stacks need a
#: layer off); the choice is recorded with every result.
_BASE_SETS: tuple[dict[str, bool], ...] = (
    {"new_netns": True, "landlock": True, "landlock_tcp": True, "landlock_scope": True, "drop_caps": True},
    {"new_netns": False, "landlock": True, "landlock_tcp": True, "landlock_scope": True, "drop_caps": True},
    {"new_netns": True, "landlock": True, "landlock_tcp": False, "landlock_scope": True, "drop_caps": True},
    {"new_netns": True, "landlock": False, "landlock_tcp": False, "landlock_scope": False, "drop_caps": True},
    {"new_netns": True, "landlock": False, "landlock_tcp": False, "landlock_scope": False, "drop_caps": False},
    {"new_netns": False, "landlock": True, "landlock_tcp": False, "landlock_scope": False, "drop_caps": False},
    {"new_netns": False, "landlock": False, "landlock_tcp": False, "landlock_scope": False, "drop_caps": False},
)
LAYER_SETS: tuple[dict[str, bool], ...] = tuple(
    {**b, "seccomp_unix": sec} for b in _BASE_SETS for sec in (True, False))

#: the names ``KBENCH_SANDBOX_LAYERS`` takes, each for the layers it switches on
LAYER_NAMES = {"netns": ("new_netns",), "landlock": ("landlock", "landlock_tcp", "landlock_scope"),
               "caps": ("drop_caps",), "seccomp": ("seccomp_unix",)}


def pinned_layers(raw: str | None = None) -> dict[str, bool] | None:
    """The layer set ``KBENCH_SANDBOX_LAYERS`` (or ``raw``) asks to try first, e.g. ``netns,caps``; None
    when unset or empty.

    Raises:
        ValueError: a name other than those of :data:`LAYER_NAMES` (a typo would otherwise switch that
            layer off without a word).
    """
    raw = os.environ.get("KBENCH_SANDBOX_LAYERS", "") if raw is None else raw
    want = [x.strip().lower() for x in raw.split(",") if x.strip()]
    if not want:
        return None
    bad = [x for x in want if x not in LAYER_NAMES]
    if bad:
        raise ValueError(f"KBENCH_SANDBOX_LAYERS={raw!r}: unknown layer(s) {', '.join(bad)}; "
                         f"expected a comma-separated subset of {', '.join(LAYER_NAMES)}")
    return {flag: name in want for name, flags in LAYER_NAMES.items() for flag in flags}
