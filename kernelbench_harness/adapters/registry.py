"""Find the adapter for a ``--model`` spec.

Specs:

- ``openai/<model>``, ``anthropic/<model>``, ``google/<model>``: the provider's official SDK;
- ``local/<served-name>`` (or bare ``local``: the server's first model): an OpenAI-compatible server
  such as vLLM or SGLang;
- ``replay:PATH``: stored generations (JSONL); ``scripted:PATH``: replies from a JSON script;
- ``bundled``: kbench's own example solutions for the bundled suite (offline);
- an alias from ``kbench.toml`` ``[aliases]`` or a built-in one: ``cuda-agent`` (local policy at
  ``$KBENCH_CUDA_AGENT_BASE_URL``, default ``http://localhost:8000/v1``), ``claude``, ``gemini``, ``gpt``;
- ``<name>/<model>`` or ``<name>:<arg>`` where ``<name>`` is an entry point of the group
  ``kernelbench_harness.adapters``: the entry point is a callable ``factory(model: str, options: dict)
  -> ModelAdapter`` (``model`` is the part after the separator, "" for a bare ``<name>``).

No provider SDK is imported here: the adapter modules import theirs when a request is made or when
:meth:`~kernelbench_harness.adapters.base.ModelAdapter.check_ready` runs.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import importlib.metadata
import importlib.util
import logging
import socket
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import KbenchConfig, load_config
from ..errors import ConfigError, KbenchError, PrerequisiteError
from .base import ModelAdapter

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROVIDERS",
    "AdapterInfo",
    "AdapterStatus",
    "ProviderInfo",
    "adapter_status",
    "adapter_statuses",
    "get_adapter",
    "list_adapters",
    "parse_model_args",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "kernelbench_harness.adapters"


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """A provider kbench ships an adapter for.

    Attributes:
        name: the spec prefix (``openai`` in ``openai/gpt-5``).
        target: ``"module:Class"`` of the adapter, imported on use.
        sdk_module: the SDK the adapter imports; extra: the pip extra that installs it.
        key_envs: the variables a key is read from (empty: no key needed).
        description: one line for ``kbench models list``.
    """

    name: str
    target: str
    sdk_module: str
    extra: str
    key_envs: tuple[str, ...]
    description: str


PROVIDERS: Mapping[str, ProviderInfo] = {
    "openai": ProviderInfo("openai", "kernelbench_harness.adapters.openai_chat:OpenAIChatAdapter", "openai",
                           "openai", ("OPENAI_API_KEY",), "OpenAI chat completions (OPENAI_BASE_URL for others)"),
    "anthropic": ProviderInfo("anthropic", "kernelbench_harness.adapters.anthropic_messages:AnthropicAdapter",
                              "anthropic", "anthropic", ("ANTHROPIC_API_KEY",), "Anthropic Messages API"),
    "google": ProviderInfo("google", "kernelbench_harness.adapters.google_gemini:GoogleAdapter", "google.genai",
                           "google", ("GOOGLE_API_KEY", "GEMINI_API_KEY"), "Gemini API generateContent"),
    "local": ProviderInfo("local", "kernelbench_harness.adapters.openai_chat:LocalAdapter", "openai", "openai",
                          (), "OpenAI-compatible local server (vLLM, SGLang); KBENCH_LOCAL_BASE_URL"),
}


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    """One entry of ``kbench models list``.

    Attributes:
        name: what to pass to ``--model`` (an alias, or a spec pattern such as ``openai/<model>``).
        spec: what it resolves to.
        provider: ``openai``, ``anthropic``, ``google``, ``local``, ``replay``, ``scripted``,
            ``bundled`` or an entry point's name.
        kind: ``alias``, ``provider``, ``builtin`` (no network: replay, scripted, bundled) or
            ``entry-point``.
        description: one line.
        options: the alias's adapter options.
    """

    name: str
    spec: str
    provider: str
    kind: str
    description: str = ""
    options: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AdapterStatus:
    """Whether an adapter can be used now. None: not applicable or not checked.

    Attributes:
        info: the entry.
        usable: all checks that apply passed.
        extra_installed: the provider's SDK imports.
        key_present: a key is set (None when none is needed).
        server_reachable: the endpoint accepts a connection (local servers: answers ``/models``).
        detail: the first problem and its fix, or what was found (the served model).
    """

    info: AdapterInfo
    usable: bool
    extra_installed: bool | None = None
    key_present: bool | None = None
    server_reachable: bool | None = None
    detail: str = ""


def parse_model_args(items: Sequence[str] | None) -> dict[str, Any]:
    """Parse ``-M key=value`` arguments; values are read as TOML literals when they parse, else strings.

    ``temperature=0.2`` -> 0.2, ``max_tokens=8192`` -> 8192, ``stream=false`` -> False,
    ``reasoning_effort=high`` -> ``"high"``, ``stop=["\\n\\n"]`` -> a list.

    Raises:
        ConfigError: an item without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"bad model argument {item!r}", fix="write -M key=value, e.g. -M temperature=0.2")
        try:
            value: Any = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key] = value
    return out


def _load_target(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    try:
        return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception as e:  # noqa: BLE001 - broken metadata must not break kbench
        log.warning("cannot read entry points of %s: %r", ENTRY_POINT_GROUP, e)
        return {}


def _split(spec: str) -> tuple[str, str, str]:
    """``"openai/gpt-5"`` -> ("openai", "/", "gpt-5"); ``"replay:x.jsonl"`` -> ("replay", ":", "x.jsonl")."""
    slash, colon = spec.find("/"), spec.find(":")
    if colon != -1 and (slash == -1 or colon < slash):
        return spec[:colon], ":", spec[colon + 1:]
    if slash != -1:
        return spec[:slash], "/", spec[slash + 1:]
    return spec, "", ""


def get_adapter(spec: str, *, options: Mapping[str, Any] | None = None,
                config: KbenchConfig | None = None) -> ModelAdapter:
    """The adapter for ``spec`` (see the module docstring for the forms).

    Args:
        spec: the ``--model`` value.
        options: adapter options and default model arguments (``-M`` values; see
            :mod:`kernelbench_harness.adapters.chat`); they override an alias's options.
        config: the resolved ``kbench.toml``; default: loaded now.

    Returns:
        An adapter; call its ``check_ready()`` before a run (keys, SDKs and servers are checked there).

    Raises:
        ConfigError: unknown spec, alias loop, bad options, missing replay/script file.
        PrerequisiteError: an entry point that fails to load.
    """
    cfg = config if config is not None else load_config()
    opts: dict[str, Any] = dict(options or {})
    seen: list[str] = []
    spec = str(spec).strip()
    while spec in cfg.aliases:
        if spec in seen:
            raise ConfigError(f"alias loop: {' -> '.join(seen + [spec])}", fix="fix [aliases] in kbench.toml")
        seen.append(spec)
        alias = cfg.aliases[spec]
        opts = {**dict(alias.options), **opts}
        spec = alias.spec

    prefix, sep, rest = _split(spec)
    if sep == ":" and prefix == "replay":
        from .replay import ReplayAdapter

        return ReplayAdapter(rest, options=opts)
    if sep == ":" and prefix == "scripted":
        from .scripted import ScriptedAdapter

        return ScriptedAdapter.from_file(rest, options=opts)
    if spec == "bundled":
        from .bundled import BundledAdapter

        return BundledAdapter(opts)
    if prefix in PROVIDERS and (sep == "/" or (sep == "" and prefix == "local")):
        if sep == "/" and not rest:
            raise ConfigError(f"model spec {spec!r} names no model", fix=f"write {prefix}/<model>")
        cls = _load_target(PROVIDERS[prefix].target)
        return cls(rest, options=opts, config=cfg)
    eps = _entry_points()
    ep = eps.get(spec) or (eps.get(prefix) if sep else None)
    if ep is not None:
        try:
            factory: Callable[..., ModelAdapter] = ep.load()
        except Exception as e:  # noqa: BLE001 - any failure of third-party code to import
            raise PrerequisiteError(f"adapter entry point {ep.name} ({ep.value}) failed to load: {e}",
                                    fix="reinstall the package that provides it") from None
        return factory(rest if ep.name == prefix and sep else "", opts)
    known = ", ".join([f"{p}/<model>" for p in PROVIDERS] + ["replay:PATH", "bundled"] + sorted(cfg.aliases))
    raise ConfigError(f"unknown model {spec!r}", fix=f"use one of: {known} (kbench models list)")


def list_adapters(config: KbenchConfig | None = None) -> list[AdapterInfo]:
    """Every alias, provider pattern, offline adapter and entry point, aliases first."""
    cfg = config if config is not None else load_config()
    out = [AdapterInfo(a.name, a.spec, _split(a.spec)[0], "alias", a.description or f"alias of {a.spec}",
                       dict(a.options)) for a in cfg.aliases.values()]
    for p in PROVIDERS.values():
        pattern = "local/<name>" if p.name == "local" else f"{p.name}/<model>"
        out.append(AdapterInfo(pattern, pattern, p.name, "provider", p.description))
    out += [
        AdapterInfo("bundled", "bundled", "bundled", "builtin", "kbench's example solutions (offline)"),
        AdapterInfo("replay:PATH", "replay:PATH", "replay", "builtin", "stored generations from a JSONL file"),
        AdapterInfo("scripted:PATH", "scripted:PATH", "scripted", "builtin", "replies from a JSON script (tests)"),
    ]
    for name, ep in sorted(_entry_points().items()):
        out.append(AdapterInfo(name, name, name, "entry-point", ep.value))
    return out


def _sdk_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _tcp_reachable(url: str | None, timeout_s: float) -> bool:
    u = urllib.parse.urlparse(url or "")
    if not u.hostname:
        return False
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((u.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


_DEFAULT_HOSTS = {"anthropic": "https://api.anthropic.com", "google": "https://generativelanguage.googleapis.com"}


def adapter_status(info: AdapterInfo, *, config: KbenchConfig | None = None, timeout_s: float = 1.5,
                   probe_network: bool = True) -> AdapterStatus:
    """Check whether ``info`` can be used now: SDK installed, key set, endpoint reachable.

    Local servers are asked for ``/models`` (which also names the served model); cloud endpoints get
    a TCP connection attempt. Both use ``timeout_s`` and are skipped with ``probe_network=False``.
    Never raises.
    """
    if info.kind == "builtin":
        return AdapterStatus(info, True, detail="offline")
    cfg = config if config is not None else load_config()
    spec = info.name
    if info.kind == "provider":  # a pattern: check the provider with a stand-in model name
        spec = "local" if info.provider == "local" else f"{info.provider}/model"
    try:
        adapter = get_adapter(spec, config=cfg)
    except KbenchError as e:
        return AdapterStatus(info, False, detail=str(e))
    except Exception as e:  # noqa: BLE001 - an entry point's bug
        return AdapterStatus(info, False, detail=f"{type(e).__name__}: {e}")
    from .chat import ChatAdapter
    from .openai_chat import LocalAdapter

    if not isinstance(adapter, ChatAdapter):
        try:
            adapter.check_ready()
        except KbenchError as e:
            return AdapterStatus(info, False, detail=str(e))
        return AdapterStatus(info, True)
    extra = _sdk_installed(adapter.sdk_module)
    key = adapter.has_key if adapter.needs_key else None
    problems = []
    if not extra:
        problems.append(f"pip install 'kernelbench-harness[{adapter.extra}]'")
    if key is False:
        problems.append(f"set {' or '.join(adapter.key_env_names)}")
    reachable: bool | None = None
    detail = ""
    if probe_network:
        if isinstance(adapter, LocalAdapter):
            from .openai_chat import list_served_models

            try:
                served = list_served_models(adapter.base_url or "", timeout_s=timeout_s)
                reachable = True
                detail = f"serves {', '.join(served[:3]) or 'no model'} at {adapter.base_url}"
            except PrerequisiteError as e:
                reachable = False
                problems.append(f"{e.message}: {adapter._unreachable_fix()}")
        else:
            url = adapter.base_url or _DEFAULT_HOSTS.get(adapter.provider)
            reachable = _tcp_reachable(url, timeout_s)
            if not reachable:
                problems.append(f"cannot connect to {url}")
    usable = not problems
    return AdapterStatus(info, usable, extra, key, reachable, "; ".join(problems) if problems else detail)


def adapter_statuses(infos: Sequence[AdapterInfo], *, config: KbenchConfig | None = None,
                     timeout_s: float = 1.5, probe_network: bool = True) -> list[AdapterStatus]:
    """:func:`adapter_status` of each entry, probed in parallel threads, in the order given."""
    cfg = config if config is not None else load_config()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(16, len(infos)))) as pool:
        return list(pool.map(lambda i: adapter_status(i, config=cfg, timeout_s=timeout_s,
                                                      probe_network=probe_network), infos))
