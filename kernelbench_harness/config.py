"""User configuration from ``kbench.toml``: model aliases, a price table and per-provider settings.

The file is looked up at ``$KBENCH_CONFIG`` when set, else ``./kbench.toml``; without either, the
built-in defaults apply. Example::

    [aliases]
    mypolicy = "local/qwen-kernel-rl"                # a spec string
    [aliases.big-policy]                              # or a table: spec + adapter options
    spec = "local/qwen-kernel-rl-32b"
    base_url = "http://gpu-box:8000/v1"
    temperature = 0.6

    [prices."openai/gpt-5"]                           # USD per million tokens
    input_per_mtok = 1.25
    output_per_mtok = 10.0
    cached_input_per_mtok = 0.125                     # optional; input price otherwise

    [providers.openai]                                # openai, anthropic, google or local
    base_url = "https://my-proxy.example/v1"
    api_key_env = "MY_OPENAI_KEY"
    max_concurrency = 4

README.md shows the same example (section "Configuration: kbench.toml"). The file holds only the
three tables above: any other top-level key (a misspelt ``[aliasses]``, which would otherwise leave
every alias in it undefined) is refused with the known ones. A ``[providers.<name>]`` table must name a
built-in provider or an installed adapter entry point (for adapters that read it); any other name is
refused with the list of known ones.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import ConfigError

__all__ = ["Alias", "KbenchConfig", "Price", "ProviderSettings", "config_path", "load_config"]

log = logging.getLogger(__name__)



def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Alias:
    """A short model name that stands for a spec plus adapter options.

    Attributes:
        name: the alias (``cuda-agent``, ``claude``...).
        spec: what it resolves to (``openai/gpt-5``, ``local/<served-name>``, ``local``...).
        options: adapter options and default model arguments (``base_url``, ``temperature``...).
        description: one line for ``kbench models list``.
        builtin: True for the aliases kbench ships.
    """

    name: str
    spec: str
    options: Mapping[str, Any] = field(default_factory=_empty)
    description: str = ""
    builtin: bool = False


@dataclass(frozen=True, slots=True)
class Price:
    """Token prices in USD per million tokens.

    Attributes:
        input_per_mtok: uncached input tokens.
        output_per_mtok: output tokens (reasoning tokens are billed as output).
        cached_input_per_mtok: cache-read input tokens; None means the input price.
    """

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    def cost_usd(self, input_tokens: int | None, output_tokens: int | None,
                 cached_tokens: int | None = None) -> float | None:
        """Cost of one call in USD, or None when the provider reported no token counts.

        Args:
            input_tokens: all input tokens, cached ones included.
            output_tokens: all output tokens, reasoning ones included.
            cached_tokens: the part of ``input_tokens`` read from the provider's cache.
        """
        if input_tokens is None and output_tokens is None:
            return None
        cached = min(cached_tokens or 0, input_tokens or 0)
        cached_rate = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        return ((((input_tokens or 0) - cached) * self.input_per_mtok + cached * cached_rate
                 + (output_tokens or 0) * self.output_per_mtok) / 1e6)


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Per-provider overrides from ``[providers.<name>]``; None means the adapter's default."""

    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int | None = None


def builtin_aliases() -> dict[str, Alias]:
    """The aliases kbench ships.

    ``cuda-agent`` is served at ``$KBENCH_CUDA_AGENT_BASE_URL`` (default ``http://localhost:8000/v1``),
    read when the adapter is made; its model name comes from the server's ``/v1/models``.
    """
    return {
        "cuda-agent": Alias(
            "cuda-agent", "local",
            MappingProxyType({"base_url_env": "KBENCH_CUDA_AGENT_BASE_URL", "name": "cuda-agent"}),
            "local RL policy behind an OpenAI-compatible server (vLLM/SGLang)", builtin=True),
        "claude": Alias("claude", "anthropic/claude-opus-4-5", description="Anthropic Claude Opus 4.5",
                        builtin=True),
        "gemini": Alias("gemini", "google/gemini-3-pro", description="Google Gemini 3 Pro", builtin=True),
        "gpt": Alias("gpt", "openai/gpt-5", description="OpenAI GPT-5", builtin=True),
    }


@dataclass(frozen=True, slots=True)
class KbenchConfig:
    """Resolved configuration (built-ins merged with the file). Read-only.

    Attributes:
        aliases: alias name -> :class:`Alias` (file entries override built-ins of the same name).
        prices: spec (``openai/gpt-5``) or alias -> :class:`Price`.
        providers: provider name -> :class:`ProviderSettings`.
        path: the file read, or None when none was found.
    """

    aliases: Mapping[str, Alias] = field(default_factory=lambda: MappingProxyType(builtin_aliases()))
    prices: Mapping[str, Price] = field(default_factory=_empty)
    providers: Mapping[str, ProviderSettings] = field(default_factory=_empty)
    path: str | None = None

    def price_for(self, *names: str) -> Price | None:
        """The first price entry among ``names`` (e.g. the resolved spec, then the alias)."""
        for n in names:
            if n and n in self.prices:
                return self.prices[n]
        return None

    def provider(self, name: str) -> ProviderSettings:
        """Settings of provider ``name`` (all None when not configured)."""
        return self.providers.get(name) or ProviderSettings()


def config_path(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read: ``path``, else ``$KBENCH_CONFIG``, else ``./kbench.toml`` if present.

    Raises:
        ConfigError: when ``path`` or ``$KBENCH_CONFIG`` names a file that does not exist.
    """
    explicit = path if path is not None else os.environ.get("KBENCH_CONFIG") or None
    if explicit is not None:
        p = Path(explicit)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist",
                              fix="create it, or unset KBENCH_CONFIG to use ./kbench.toml")
        return p
    p = Path.cwd() / "kbench.toml"
    return p if p.is_file() else None


def load_config(path: str | os.PathLike[str] | None = None) -> KbenchConfig:
    """Read ``kbench.toml`` (see the module docstring) into a :class:`KbenchConfig`.

    Args:
        path: the file; default ``$KBENCH_CONFIG`` or ``./kbench.toml``; none found -> built-ins.

    Raises:
        ConfigError: unreadable file, invalid TOML (the message names the file and line), an
            unknown top-level key, or entries of the wrong type (the message names the file and the
            key).
    """
    p = config_path(path)
    if p is None:
        return KbenchConfig()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        where = f"{p}:{m.group(1)}" if m else str(p)
        raise ConfigError(f"{where}: invalid TOML: {e}", fix="fix the syntax at that line") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    return _from_dict(data, str(p))


def _from_dict(data: dict[str, Any], where: str) -> KbenchConfig:
    def bad(key: str, what: str) -> ConfigError:
        return ConfigError(f"{where}: {key}: {what}", fix=_EXAMPLE_FIX)

    unknown_top = [k for k in data if k not in _TOP_LEVEL]
    if unknown_top:
        near = {k: m[0] for k in unknown_top if (m := difflib.get_close_matches(k, _TOP_LEVEL, n=1))}
        hint = "".join(f"; did you mean [{m}] for [{k}]?" for k, m in near.items())
        raise ConfigError(f"{where}: unknown top-level keys {sorted(unknown_top)} (known: "
                          f"{', '.join(_TOP_LEVEL)}){hint}",
                          fix=f"rename or remove them; {_EXAMPLE_FIX}")

    aliases = builtin_aliases()
    for name, val in _table(data, "aliases", where).items():
        if isinstance(val, str):
            aliases[name] = Alias(name, val)
        elif isinstance(val, dict):
            spec = val.get("spec")
            if not isinstance(spec, str) or not spec:
                raise bad(f"aliases.{name}", "a table alias needs spec = \"provider/model\"")
            opts = {k: v for k, v in val.items() if k not in ("spec", "description")}
            aliases[name] = Alias(name, spec, MappingProxyType(opts), str(val.get("description", "")))
        else:
            raise bad(f"aliases.{name}", "must be a spec string or a table")

    prices: dict[str, Price] = {}
    for name, val in _table(data, "prices", where).items():
        if not isinstance(val, dict):
            raise bad(f"prices.{name}", "must be a table with input_per_mtok and output_per_mtok")
        try:
            cached = val.get("cached_input_per_mtok")
            prices[name] = Price(float(val["input_per_mtok"]), float(val["output_per_mtok"]),
                                 None if cached is None else float(cached))
        except KeyError as e:
            raise bad(f"prices.{name}", f"missing {e.args[0]}") from None
        except (TypeError, ValueError):
            raise bad(f"prices.{name}", "prices must be numbers (USD per million tokens)") from None

    providers: dict[str, ProviderSettings] = {}
    for name, val in _table(data, "providers", where).items():
        known = _provider_names(name)
        if name not in known:
            raise ConfigError(f"{where}: [providers.{name}]: no provider is named {name!r} (known: "
                              f"{', '.join(known)})", fix=f"rename the table to one of them, or remove it; "
                                                         f"{_EXAMPLE_FIX}")
        if not isinstance(val, dict):
            raise bad(f"providers.{name}", "must be a table")
        unknown = set(val) - {"base_url", "api_key_env", "max_concurrency"}
        if unknown:
            raise bad(f"providers.{name}", f"unknown keys {sorted(unknown)} "
                      "(known: base_url, api_key_env, max_concurrency)")
        mc = val.get("max_concurrency")
        if mc is not None and (not isinstance(mc, int) or isinstance(mc, bool) or mc < 1):
            raise bad(f"providers.{name}.max_concurrency", "must be a positive integer")
        for k in ("base_url", "api_key_env"):
            if k in val and not isinstance(val[k], str):
                raise bad(f"providers.{name}.{k}", "must be a string")
        providers[name] = ProviderSettings(val.get("base_url"), val.get("api_key_env"), mc)

    return KbenchConfig(MappingProxyType(aliases), MappingProxyType(prices), MappingProxyType(providers),
                        where)


_TOP_LEVEL = ("aliases", "prices", "providers")
_EXAMPLE_FIX = "see the kbench.toml example in README.md (section \"Configuration: kbench.toml\")"


def _provider_names(name: str) -> list[str]:
    """The names a ``[providers.<name>]`` table may take: the built-in providers, and the adapter entry
    points when ``name`` is none of those (read only then: reading them takes a while)."""
    from .adapters.registry import PROVIDERS, _entry_points  # the adapters import this module

    names = list(PROVIDERS)
    return names if name in names else names + sorted(set(_entry_points()) - set(names))


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    val = data.get(key, {})
    if not isinstance(val, dict):
        raise ConfigError(f"{where}: [{key}] must be a table", fix=f"write it as [{key}] with entries below")
    return val
