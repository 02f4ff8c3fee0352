"""OpenAI chat completions (official ``openai`` SDK): ``openai/<model>`` and local OpenAI-compatible servers.

- ``openai/<model>``: key from ``OPENAI_API_KEY`` (needed only for api.openai.com), base URL from
  ``OPENAI_BASE_URL``.
- ``local/<served-name>`` and the ``cuda-agent`` alias: a policy served by vLLM or SGLang; no key
  needed (``api_key_env`` if the server wants one); base URL from the option, the variable named by
  ``base_url_env`` (``KBENCH_CUDA_AGENT_BASE_URL`` for ``cuda-agent``), ``KBENCH_LOCAL_BASE_URL``,
  else ``http://localhost:8000/v1``. Without a model name the server's ``/v1/models`` decides.

Model arguments the SDK knows (``temperature``, ``top_p``, ``max_tokens``, ``max_completion_tokens``,
``reasoning_effort``, ``seed``...) are passed as such; others go in the request body (``extra_body``),
as vLLM's ``top_k`` or ``repetition_penalty``. One close to a known key and none of vLLM's or SGLang's
sampling parameters (:data:`SERVER_PARAMS`) is warned about (see :mod:`kernelbench_harness.adapters.chat`).
"""

from __future__ import annotations

import inspect
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..errors import PrerequisiteError
from .chat import ChatAdapter, Reply
from .retry import ErrorInfo, ErrorKind

__all__ = ["SERVER_PARAMS", "LocalAdapter", "OpenAIChatAdapter", "list_served_models"]

log = logging.getLogger(__name__)

SERVER_PARAMS: frozenset[str] = frozenset({
    # vLLM's extra parameters of chat completions (sampling, decoding, chat template)
    "best_of", "use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids", "bad_words",
    "echo", "add_generation_prompt", "continue_final_message", "add_special_tokens", "documents", "chat_template",
    "chat_template_kwargs", "mm_processor_kwargs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_decoding_backend", "guided_whitespace_pattern", "structural_tag", "structured_outputs", "priority",
    "request_id", "logits_processors", "return_tokens_as_token_ids", "cache_salt", "kv_transfer_params",
    "vllm_xargs",
    # SGLang's
    "regex", "ebnf", "json_schema", "no_stop_trim", "lora_path", "session_params", "separate_reasoning",
    "stream_reasoning", "return_hidden_states", "rid",
})
"""Request-body fields of vLLM's and SGLang's OpenAI-compatible servers beyond the SDK's named parameters."""

_FATAL_CODES = ("insufficient_quota", "invalid_api_key", "model_not_found", "context_length_exceeded")


class OpenAIChatAdapter(ChatAdapter):
    """``POST {base_url}/chat/completions`` through ``openai.AsyncOpenAI`` (SDK retries off)."""

    provider = "openai"
    sdk_module = "openai"
    extra = "openai"
    key_envs = ("OPENAI_API_KEY",)
    base_url_envs = ("OPENAI_BASE_URL",)
    default_base_url = "https://api.openai.com/v1"
    server_params = SERVER_PARAMS
    _create_params: frozenset[str] | None = None

    @property
    def needs_key(self) -> bool:
        host = urllib.parse.urlparse(self.base_url or "").hostname or ""
        return host.endswith("openai.com")

    def _make_client(self, sdk: Any) -> Any:
        return sdk.AsyncOpenAI(api_key=self._api_key or "EMPTY", base_url=self.base_url,
                               timeout=self.timeout_s, max_retries=0)

    def _known_params(self, client: Any) -> frozenset[str]:
        if type(self)._create_params is None:
            sig = inspect.signature(client.chat.completions.create)
            type(self)._create_params = frozenset(p for p in sig.parameters if p not in ("messages", "model"))
        return type(self)._create_params  # type: ignore[return-value]

    async def _complete(self, client: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        known = self._known_params(client)
        kwargs = {k: v for k, v in params.items() if k in known}
        extra = {k: v for k, v in params.items() if k not in known}
        if extra:
            kwargs["extra_body"] = {**extra, **(kwargs.get("extra_body") or {})}
        model = await self._model_name(client)
        resp = await client.chat.completions.create(model=model, messages=messages, **kwargs)
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content or "") if choice and choice.message else ""
        usage = resp.usage
        cached = reasoning = None
        if usage is not None:
            ptd = getattr(usage, "prompt_tokens_details", None)
            ctd = getattr(usage, "completion_tokens_details", None)
            cached = getattr(ptd, "cached_tokens", None) if ptd else None
            reasoning = getattr(ctd, "reasoning_tokens", None) if ctd else None
        return Reply(
            text=text,
            model=resp.model or model,
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
            cached_tokens=cached,
            reasoning_tokens=reasoning,
            finish_reason=(choice.finish_reason or "") if choice else "",
        )

    async def _model_name(self, client: Any) -> str:
        return self.model

    def classify(self, exc: BaseException) -> ErrorInfo:
        common = self._classify_common(exc)
        if common is not None:
            return common
        import openai

        if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
            return ErrorInfo(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {exc}")
        if isinstance(exc, openai.APIStatusError):
            return self._status_info(exc.status_code, str(getattr(exc, "message", exc)), exc.response.headers,
                                     fatal_codes=_FATAL_CODES, body=exc.body)
        return ErrorInfo(ErrorKind.FATAL, f"{type(exc).__name__}: {exc}")


def list_served_models(base_url: str, *, api_key: str | None = None, timeout_s: float = 3.0) -> list[str]:
    """Model ids an OpenAI-compatible server lists at ``{base_url}/models``.

    Raises:
        PrerequisiteError: nothing answers at ``base_url`` (the message names it), or the answer is
            not an OpenAI model list.
    """
    req = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Accept": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        raise PrerequisiteError(f"{base_url} answered HTTP {e.code} to GET /models",
                                fix="check that it is an OpenAI-compatible server (vLLM, SGLang)") from None
    except (urllib.error.URLError, OSError, TimeoutError):
        raise PrerequisiteError(f"nothing answers at {base_url}") from None
    except ValueError:
        raise PrerequisiteError(f"{base_url}/models did not return JSON",
                                fix="check that it is an OpenAI-compatible server (vLLM, SGLang)") from None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise PrerequisiteError(f"{base_url}/models is not an OpenAI model list")
    return [str(m["id"]) for m in items if isinstance(m, dict) and "id" in m]


class LocalAdapter(OpenAIChatAdapter):
    """A policy served locally through an OpenAI-compatible API (vLLM, SGLang): ``local/<name>``,
    ``cuda-agent``. No key needed; the model name comes from ``/v1/models`` when not given."""

    provider = "local"
    key_envs = ("KBENCH_LOCAL_API_KEY",)
    base_url_envs = ("KBENCH_LOCAL_BASE_URL",)
    default_base_url = "http://localhost:8000/v1"
    default_max_concurrency = 32

    @property
    def needs_key(self) -> bool:
        return False

    def _unreachable_fix(self) -> str:
        var = self.base_url_env or self.base_url_envs[0]
        return f"start vLLM/SGLang or set {var}"

    def check_ready(self) -> None:
        """Check the SDK and that the server answers ``GET /models`` (3 s timeout); learn the model name.

        Raises:
            PrerequisiteError: ``nothing answers at <url> — start vLLM/SGLang or set <VAR>``, or the
                server lists no model, or the openai package is missing.
        """
        self._import_sdk()
        try:
            served = list_served_models(self.base_url or "", api_key=self._api_key)
        except PrerequisiteError as e:
            if e.message.startswith("nothing answers"):
                # the message carries its fix, so the CLI prints it once
                raise PrerequisiteError(f"{e.message} — {self._unreachable_fix()}") from None
            raise
        if not self.model:
            if not served:
                raise PrerequisiteError(f"{self.base_url} serves no model",
                                        fix="start the server with a model, or pass -M model=NAME")
            self.model = served[0]
            if len(served) > 1:
                log.info("%s: %s serves %d models, using %s (choose with -M model=NAME)", self.name,
                         self.base_url, len(served), self.model)
        elif served and self.model not in served:
            log.warning("%s: model %r not among those %s lists (%s)", self.name, self.model, self.base_url,
                        ", ".join(served[:5]))

    async def _model_name(self, client: Any) -> str:
        if not self.model:
            page = await client.models.list()
            ids = [m.id for m in page.data]
            if not ids:
                raise PrerequisiteError(f"{self.base_url} serves no model",
                                        fix="start the server with a model, or pass -M model=NAME")
            self.model = ids[0]
        return self.model
