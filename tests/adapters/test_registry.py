"""Spec resolution, aliases, entry points, prerequisites, and ``kbench models list``."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import socket
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from fakes import FakeOpenAIServer

from kernelbench_harness.adapters import (
    ENTRY_POINT_GROUP,
    GenerationRequest,
    SampleSpec,
    get_adapter,
    list_adapters,
    parse_model_args,
    registry,
)
from kernelbench_harness.adapters.anthropic_messages import AnthropicAdapter
from kernelbench_harness.adapters.google_gemini import GoogleAdapter
from kernelbench_harness.adapters.openai_chat import LocalAdapter, OpenAIChatAdapter
from kernelbench_harness.adapters.replay import ReplayAdapter
from kernelbench_harness.adapters.scripted import ScriptedAdapter
from kernelbench_harness.cli import cli
from kernelbench_harness.config import KbenchConfig, load_config
from kernelbench_harness.core import Problem
from kernelbench_harness.errors import ConfigError, PrerequisiteError

CFG = KbenchConfig()
PROBLEM = Problem(1, 1, "Identity", "class Model: pass\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for var in ("KBENCH_CONFIG", "KBENCH_CUDA_AGENT_BASE_URL", "KBENCH_LOCAL_BASE_URL", "OPENAI_BASE_URL",
                "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray ./kbench.toml


@pytest.mark.parametrize("spec,cls,name,model", [
    ("openai/gpt-5", OpenAIChatAdapter, "openai/gpt-5", "gpt-5"),
    ("anthropic/claude-opus-4-5", AnthropicAdapter, "anthropic/claude-opus-4-5", "claude-opus-4-5"),
    ("google/gemini-3-pro", GoogleAdapter, "google/gemini-3-pro", "gemini-3-pro"),
    ("local/qwen-kernel", LocalAdapter, "local/qwen-kernel", "qwen-kernel"),
    ("gpt", OpenAIChatAdapter, "openai/gpt-5", "gpt-5"),
    ("claude", AnthropicAdapter, "anthropic/claude-opus-4-5", "claude-opus-4-5"),
    ("gemini", GoogleAdapter, "google/gemini-3-pro", "gemini-3-pro"),
    ("cuda-agent", LocalAdapter, "cuda-agent", ""),
])
def test_specs_resolve(spec, cls, name, model):
    a = get_adapter(spec, config=CFG)
    assert type(a) is cls and a.name == name and a.model == model and a.is_llm


def test_cuda_agent_defaults_and_env(monkeypatch):
    a = get_adapter("cuda-agent", config=CFG)
    assert a.base_url == "http://localhost:8000/v1" and not a.needs_key
    monkeypatch.setenv("KBENCH_CUDA_AGENT_BASE_URL", "http://gpu-box:9000/v1/")
    assert get_adapter("cuda-agent", config=CFG).base_url == "http://gpu-box:9000/v1"
    # an explicit option wins over the variable; -M model= picks the served model
    a = get_adapter("cuda-agent", options={"base_url": "http://x:1/v1", "model": "pol"}, config=CFG)
    assert (a.base_url, a.model, a.name) == ("http://x:1/v1", "pol", "cuda-agent")


def test_cuda_agent_nothing_listening_is_a_clear_prerequisite_error(monkeypatch):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    monkeypatch.setenv("KBENCH_CUDA_AGENT_BASE_URL", url)
    with pytest.raises(PrerequisiteError) as ei:
        get_adapter("cuda-agent", config=CFG).check_ready()
    assert ei.value.message == (f"nothing answers at {url} — start vLLM/SGLang or set KBENCH_CUDA_AGENT_BASE_URL")


def test_cuda_agent_default_url_message():
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("something listens on localhost:8000 here")
    with pytest.raises(PrerequisiteError, match="^nothing answers at http://localhost:8000/v1 — start "
                                                "vLLM/SGLang or set KBENCH_CUDA_AGENT_BASE_URL$"):
        get_adapter("cuda-agent", config=CFG).check_ready()


def test_cuda_agent_learns_model_name_from_server(monkeypatch):
    with FakeOpenAIServer(model="policy-7b") as srv:
        monkeypatch.setenv("KBENCH_CUDA_AGENT_BASE_URL", srv.base_url)
        a = get_adapter("cuda-agent", config=CFG)
        a.check_ready()
        assert a.model == "policy-7b"
        # without check_ready the adapter asks the server itself
        b = get_adapter("cuda-agent", config=CFG)

        async def go():
            try:
                return await b.generate(GenerationRequest(SampleSpec(PROBLEM, b.name, 0), 0,
                                                          ({"role": "user", "content": "hi"},)))
            finally:
                await b.aclose()

        gen = asyncio.run(go())
        assert gen.error == "" and gen.model == "policy-7b"
        assert srv.generation_requests()[-1].body["model"] == "policy-7b"
        assert [r.path for r in srv.requests].count("/v1/models") == 2
        assert "authorization" not in srv.requests[0].headers  # no key needed, none sent by check_ready


def test_replay_scripted_bundled(tmp_path):
    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"level": 1, "problem_id": 1, "code": "x = 1"}\n')
    a = get_adapter(f"replay:{gens}", config=CFG)
    assert isinstance(a, ReplayAdapter) and not a.is_llm and a.name == f"replay:{gens}"
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["a", "b"]))
    s = get_adapter(f"scripted:{script}", config=CFG)
    assert isinstance(s, ScriptedAdapter) and s.is_llm and s.name == "scripted:s"
    b = get_adapter("bundled", options={"variant": "triton", "device": "cpu"}, config=CFG)
    assert type(b).__name__ == "BundledAdapter" and not b.is_llm


def test_unknown_spec_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown model 'nope/x'") as ei:
        get_adapter("nope/x", config=CFG)
    assert "kbench models list" in ei.value.fix
    with pytest.raises(ConfigError, match="names no model"):
        get_adapter("openai/", config=CFG)
    with pytest.raises(ConfigError, match="does not exist"):
        get_adapter("replay:/no/such/file.jsonl", config=CFG)


def test_aliases_and_prices_from_kbench_toml(tmp_path, monkeypatch):
    (tmp_path / "kbench.toml").write_text(textwrap.dedent("""\
        [aliases]
        fast = "openai/gpt-5-mini"
        loop-a = "loop-b"
        loop-b = "loop-a"
        [aliases.my-policy]
        spec = "local/qwen-rl"
        base_url = "http://gpu:8000/v1"
        temperature = 0.6
        description = "our RL policy"
        [prices."openai/gpt-5-mini"]
        input_per_mtok = 0.25
        output_per_mtok = 2.0
        [providers.local]
        max_concurrency = 3
    """))
    cfg = load_config()
    assert cfg.path and cfg.path.endswith("kbench.toml")
    a = get_adapter("fast", config=cfg)
    assert a.name == "openai/gpt-5-mini" and cfg.price_for(a.name).output_per_mtok == 2.0
    p = get_adapter("my-policy", options={"temperature": 0.1}, config=cfg)
    assert isinstance(p, LocalAdapter) and p.base_url == "http://gpu:8000/v1" and p.model == "qwen-rl"
    assert p.default_params == {"temperature": 0.1}  # -M overrides the alias's default
    assert p.max_concurrency == 3
    with pytest.raises(ConfigError, match="alias loop"):
        get_adapter("loop-a", config=cfg)
    names = {i.name: i for i in list_adapters(cfg)}
    assert names["my-policy"].description == "our RL policy" and "cuda-agent" in names
    # KBENCH_CONFIG wins over ./kbench.toml
    other = tmp_path / "other.toml"
    other.write_text('[aliases]\nzzz = "anthropic/claude-x"\n')
    monkeypatch.setenv("KBENCH_CONFIG", str(other))
    assert "zzz" in load_config().aliases and "fast" not in load_config().aliases


def test_bad_toml_names_file_and_line(tmp_path):
    bad = tmp_path / "kbench.toml"
    bad.write_text('[aliases]\nok = "openai/gpt-5"\nbroken = = 3\n')
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    assert f"{bad}:3" in ei.value.message
    bad.write_text('[prices."openai/x"]\ninput_per_mtok = "cheap"\noutput_per_mtok = 1\n')
    with pytest.raises(ConfigError, match=r"prices\.openai/x: prices must be numbers"):
        load_config(bad)
    bad.write_text('[providers.openai]\nmax_concurency = 3\n')
    with pytest.raises(ConfigError, match="unknown keys"):
        load_config(bad)
    bad.write_text('[providers.openia]\nbase_url = "http://proxy:1/v1"\n')  # was taken and never used
    with pytest.raises(ConfigError, match=r"\[providers\.openia\]: no provider is named 'openia' "
                                          r"\(known: openai, anthropic, google, local\)"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_unknown_top_level_key_is_refused_with_the_known_ones(tmp_path, monkeypatch):
    """A misspelt [aliasses] table was ignored, and its aliases then were "unknown model" with no hint."""
    bad = tmp_path / "custom.toml"
    bad.write_text('[aliasses]\nmypolicy = "local/qwen-kernel-rl"\n[aliases.big]\nspec = "local/qwen"\n')
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    assert ei.value.message == (f"{bad}: unknown top-level keys ['aliasses'] (known: aliases, prices, providers); "
                                "did you mean [aliases] for [aliasses]?")
    bad.write_text('temperature = 0.6\n[aliases]\nok = "openai/gpt-5"\n')  # a bare key, nothing near it
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    assert ei.value.message.endswith("unknown top-level keys ['temperature'] (known: aliases, prices, providers)")
    # the command, with KBENCH_CONFIG: refused before the model is looked up, with the file and the fix
    bad.write_text('[aliasses]\nmypolicy = "local/qwen-kernel-rl"\n')
    monkeypatch.setenv("KBENCH_CONFIG", str(bad))
    res = subprocess.run([sys.executable, "-m", "kernelbench_harness", "run", "-m", "mypolicy", "--level", "1"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert f"error: {bad}: unknown top-level keys ['aliasses']" in res.stderr and "did you mean [aliases]" in res.stderr
    assert "fix: rename or remove them" in res.stderr and "unknown model" not in res.stderr


def test_the_readme_example_that_config_errors_point_to_loads(tmp_path, monkeypatch):
    """kbench.toml errors said "see the example in kbench's docs", and no doc had one."""
    from pathlib import Path

    bad = tmp_path / "kbench.toml"
    bad.write_text('[providers]\nopenai = 3\n')
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    assert 'README.md (section "Configuration: kbench.toml")' in ei.value.fix
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Configuration: kbench.toml", 1)[1]
    bad.write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    monkeypatch.setattr(registry, "_entry_points", dict)
    cfg = load_config(bad)
    assert cfg.aliases["big-policy"].spec == "local/qwen-kernel-rl-32b" and cfg.provider("openai").max_concurrency == 4
    assert cfg.price_for("openai/gpt-5").cached_input_per_mtok == 0.125


def test_provider_settings_from_config(monkeypatch, tmp_path):
    (tmp_path / "kbench.toml").write_text(textwrap.dedent("""\
        [providers.openai]
        base_url = "http://proxy:1/v1"
        api_key_env = "MY_KEY"
        max_concurrency = 2
    """))
    monkeypatch.setenv("MY_KEY", "sk-from-my-key-variable")
    a = get_adapter("openai/gpt-5")
    assert a.base_url == "http://proxy:1/v1" and a.max_concurrency == 2 and a.has_key
    assert a.key_env_names == ("MY_KEY",)
    assert not a.needs_key  # not api.openai.com


def test_entry_point_adapters(monkeypatch):
    ep = importlib.metadata.EntryPoint(name="echo", value="fakes.entry_points:make_adapter", group=ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"echo": ep})
    a = get_adapter("echo/m1", options={"reply": "hello"}, config=CFG)
    assert isinstance(a, ScriptedAdapter) and a.name == "echo/m1" and a.script == {"*": ["hello"]}
    assert any(i.name == "echo" and i.kind == "entry-point" for i in list_adapters(CFG))
    broken = importlib.metadata.EntryPoint(name="bad", value="no_such_module_x:f", group=ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"bad": broken})
    with pytest.raises(PrerequisiteError, match="entry point bad"):
        get_adapter("bad/x", config=CFG)


def test_import_and_errors_without_any_provider_sdk(tmp_path):
    """With openai, anthropic and google-genai missing, the package imports and each adapter says what to
    install, through check_ready() and through generate()."""
    script = textwrap.dedent("""\
        import asyncio, importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("openai", "anthropic") or name.startswith("google.genai"):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None
        sys.meta_path.insert(0, Block())
        import kernelbench_harness.adapters as A
        from kernelbench_harness.errors import PrerequisiteError
        from kernelbench_harness.config import KbenchConfig
        from kernelbench_harness.core import Problem
        for spec, extra in (("openai/gpt-5", "openai"), ("anthropic/c", "anthropic"), ("google/g", "google"),
                            ("cuda-agent", "openai")):
            a = A.get_adapter(spec, options={"api_key": "k" * 20}, config=KbenchConfig())
            try:
                a.check_ready()
                raise SystemExit(f"{spec}: no error")
            except PrerequisiteError as e:
                assert e.fix == f"pip install 'kernelbench-harness[{extra}]'", (spec, e.fix)
            req = A.GenerationRequest(A.SampleSpec(Problem(1, 1, "x", "c"), spec, 0), 0, ())
            g = asyncio.run(a.generate(req))
            assert g.error_kind == "fatal" and f"[{extra}]" in g.error, g
        assert not any(m.split(".")[0] in ("openai", "anthropic") for m in sys.modules)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_parse_model_args():
    assert parse_model_args(["temperature=0.2", "reasoning_effort=high", "max_tokens=8192", "x=true",
                             'stop=["END"]', "path=/a/b"]) == {
        "temperature": 0.2, "reasoning_effort": "high", "max_tokens": 8192, "x": True, "stop": ["END"],
        "path": "/a/b"}
    with pytest.raises(ConfigError, match="bad model argument"):
        parse_model_args(["temperature"])


def test_models_list_cli(monkeypatch):
    with FakeOpenAIServer(model="policy-7b") as srv:
        monkeypatch.setenv("KBENCH_CUDA_AGENT_BASE_URL", srv.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-123456")
        res = CliRunner().invoke(cli, ["models", "list", "--json", "--timeout", "0.5"])
        assert res.exit_code == 0, res.output
        rows = {r["name"]: r for r in json.loads(res.output)}
        assert rows["cuda-agent"]["usable"] and rows["cuda-agent"]["server_reachable"]
        assert "policy-7b" in rows["cuda-agent"]["detail"]
        assert rows["claude"]["key_present"] is True
        assert rows["gpt"]["key_present"] is False and not rows["gpt"]["usable"]
        assert "set OPENAI_API_KEY" in rows["gpt"]["detail"]
        assert "sk-ant-test-key-123456" not in res.output
        res = CliRunner().invoke(cli, ["models", "list", "--offline"])
        assert res.exit_code == 0 and "cuda-agent" in res.output and "usable" in res.output
        assert "set OPENAI_API_KEY" in res.output


@pytest.mark.parametrize("kind", ["replay", "scripted"])
def test_replay_and_scripted_refuse_unknown_options_and_name_the_ones_they_take(tmp_path, kind):
    """-O modle=x (a typo) for a replay or scripted model was ignored: the run went on under the default name."""
    path = tmp_path / "g.jsonl"
    path.write_text('{"level": 1, "problem_id": 1, "code": "x"}\n' if kind == "replay" else json.dumps(["a"]))
    takes = {"replay": "model", "scripted": "name"}[kind]
    with pytest.raises(ConfigError, match=f"the {kind} adapter has no option\\(s\\) modle; it takes: {takes}") as ei:
        get_adapter(f"{kind}:{path}", options={"modle": "x"}, config=CFG)
    assert f"-O {takes}=" in ei.value.fix
    a = get_adapter(f"{kind}:{path}", options={takes: "legacy"}, config=CFG)
    assert (a.generations[0].model if kind == "replay" else a.name) == "legacy"
