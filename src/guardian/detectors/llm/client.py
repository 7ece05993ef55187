"""The chat model behind the LLM detectors, and the one careful way to call it.

Any OpenAI-compatible endpoint works (OpenAI, vLLM, Ollama, a llama.cpp server):
`ChatOpenAI` with `base_url`, `model` and the key from settings (or
`OPENAI_API_KEY`). Any LangChain `BaseChatModel` may be passed in instead.

Calls go through `LLMClient.ask`, which
- asks for schema-constrained JSON where the server offers it, through LangChain's
  `with_structured_output(method="json_schema", include_raw=True)`, and falls back
  to plain text the first time a server refuses it,
- uses LangChain's parsed answer when there is one; when parsing failed (a small
  local server that writes prose around its JSON) or the model has no structured
  output, it reads the JSON out of the raw reply text (code fences, prose around it);
  pydantic validates the answer either way,
- retries timeouts, rate limits, 5xx and malformed replies with exponential
  backoff (LangChain's `with_retry`), and gives up with an `LLMFailure` that says
  which of those it was,
- counts requests and tokens (LangChain's usage metadata, or an estimate where a
  model reports none).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from pydantic import BaseModel, ValidationError

from guardian.config import LLMSettings

T = TypeVar("T", bound=BaseModel)
FailureKind = Literal["timeout", "rate_limit", "server", "malformed", "refused", "error"]


class MalformedOutput(ValueError):
    """The model answered, but not with the JSON object asked for."""


class LLMFailure(Exception):
    """A call that failed after its retries; `kind` says how (the Assessment records it)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def endpoint_configured(cfg: LLMSettings) -> bool:
    """An endpoint counts as configured only when guardian's own settings name one.

    A stray OPENAI_API_KEY in the environment must not make guardian send
    conversations anywhere; it is used only once `llm.base_url` or `llm.api_key` is set.
    """
    return bool(cfg.base_url) or cfg.api_key is not None


def chat_model_from_settings(cfg: LLMSettings) -> BaseChatModel:
    """`ChatOpenAI` for the configured endpoint (retries are ours, so the client's are off)."""
    import os

    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    key = cfg.api_key or (SecretStr(os.environ["OPENAI_API_KEY"]) if os.environ.get("OPENAI_API_KEY") else None)
    if key is None:
        # Local servers (llama.cpp, vLLM, Ollama) accept any key; the client insists on one.
        key = SecretStr("not-needed")
    return ChatOpenAI(
        model=cfg.model,
        base_url=cfg.base_url,
        api_key=key,
        timeout=cfg.timeout_s,
        max_retries=0,
        temperature=cfg.temperature,
        max_completion_tokens=cfg.max_output_tokens,
    )


# -- parsing --------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def extract_json(text: str) -> dict[str, Any]:
    """The first JSON object in a reply: inside a ``` block, or anywhere in prose."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, ch in enumerate(candidate) if ch == "{"):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise MalformedOutput(f"no JSON object in the reply: {text[:120]!r}")


def message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [p if isinstance(p, str) else str(p.get("text", "")) for p in content]
    return "".join(parts)


def parse_reply(message: BaseMessage, schema: type[T]) -> T:
    text = message_text(message)
    cut = message.response_metadata.get("finish_reason") == "length"
    try:
        return schema.model_validate(extract_json(text))
    except (ValidationError, MalformedOutput) as exc:
        if cut:  # a JSON reply cut short parses, if at all, as one of its inner objects
            raise MalformedOutput(
                "the reply was cut off at the output token limit; raise [llm] max_output_tokens"
            ) from None
        if isinstance(exc, MalformedOutput):
            raise
        raise MalformedOutput(f"reply does not match {schema.__name__}: {exc.errors()[0]['msg']}") from None


def read_structured(output: Any, schema: type[T]) -> T:
    """The answer from `with_structured_output(..., include_raw=True)`: parsed if it can be.

    LangChain hands back `{"raw", "parsed", "parsing_error"}`. A parsed object is
    validated as it is, without reading the text again. The raw text is read by
    `parse_reply` instead when parsing failed (prose around the JSON), when the reply
    was cut off, or when its JSON does not close: LangChain's JSON parser completes a
    cut-off object, which would turn half an answer into a whole one.
    """
    raw = output["raw"] if isinstance(output, dict) else output
    if not isinstance(raw, BaseMessage):
        raise MalformedOutput(f"the model returned {type(raw).__name__}, not a message")
    parsed = output.get("parsed") if isinstance(output, dict) else None
    cut = raw.response_metadata.get("finish_reason") == "length"
    if isinstance(parsed, dict) and output.get("parsing_error") is None and not cut and _closed(message_text(raw)):
        try:
            return schema.model_validate(parsed)
        except ValidationError:
            pass  # the text reading below gives the one-sentence error
    return parse_reply(raw, schema)


def _closed(text: str) -> bool:
    """Whether the reply ends where a JSON object ends (code fences and whitespace aside)."""
    return text.strip().strip("`").strip().endswith("}")


# -- failure classes ------------------------------------------------------------------------


def classify(exc: BaseException) -> FailureKind:
    """Which kind of failure an exception is (retry decisions and the Assessment use it)."""
    import openai

    if isinstance(exc, LLMFailure):
        return exc.kind
    if isinstance(exc, MalformedOutput | openai.LengthFinishReasonError | openai.ContentFilterFinishReasonError):
        return "malformed"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, openai.InternalServerError | openai.APIConnectionError):
        return "server"
    if isinstance(exc, openai.APIStatusError):
        return "server" if exc.status_code >= 500 else "refused"
    try:
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return "timeout"
        if isinstance(exc, httpx.TransportError):
            return "server"
    except ImportError:  # pragma: no cover - httpx comes with openai
        pass
    return "error"


def _transient(exc: BaseException) -> bool:
    return classify(exc) in ("timeout", "rate_limit", "server", "malformed")


# -- cost -----------------------------------------------------------------------------------


@dataclass
class Usage:
    calls: int = 0
    tokens: int = 0
    failed_calls: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.tokens += other.tokens
        self.failed_calls += other.failed_calls


class _Meter(UsageMetadataCallbackHandler):
    """Counts every request the chat model makes, retries included, and its tokens.

    Tokens are LangChain's usage metadata: `UsageMetadataCallbackHandler` sums each
    reply's `usage_metadata` per model, so the budget reads the server's own figures.
    A reply that reports none (LangChain's fake chat models, servers that send no
    `usage`, a reply without a model name) is charged an estimate instead, about four
    characters a token for the prompt and the reply, as guardian always counted.
    Failed requests count as calls (and failed calls), with no tokens.
    """

    def __init__(self) -> None:
        super().__init__()
        self.usage = Usage()
        self._estimated = 0
        self._count_lock = threading.Lock()  # the base class's own lock guards usage_metadata
        self._prompt_chars: dict[Any, int] = {}

    def _reported(self) -> int:
        return sum(int(u.get("total_tokens", 0)) for u in list(self.usage_metadata.values()))

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *, run_id: Any, **kw: Any) -> None:
        with self._count_lock:
            self._prompt_chars[run_id] = sum(len(message_text(m)) for batch in messages for m in batch)

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        before = self._reported()
        super().on_llm_end(response, **kwargs)
        reported = self._reported()
        with self._count_lock:
            prompt_chars = self._prompt_chars.pop(kwargs.get("run_id"), 0)
            if reported == before:  # no usage from the model: ~4 characters per token
                reply_chars = sum(len(gen.text) for gens in response.generations for gen in gens)
                self._estimated += prompt_chars // 4 + reply_chars // 4
            self.usage.calls += 1
            self.usage.tokens = reported + self._estimated

    def on_llm_error(self, error: BaseException, *, run_id: Any, **kw: Any) -> None:
        with self._count_lock:
            self.usage.calls += 1
            self.usage.failed_calls += 1
            self._prompt_chars.pop(run_id, None)


# -- the client -----------------------------------------------------------------------------


class LLMClient:
    """One chat model plus the policy for calling it (structured output, retries, metering)."""

    def __init__(self, model: BaseChatModel, cfg: LLMSettings) -> None:
        self.model = model
        self.cfg = cfg
        self._structured = cfg.structured != "text" and _supports_response_format(model)
        self._lock = threading.Lock()

    def _runnable(self, schema: type[T], *, structured: bool) -> Runnable[list[BaseMessage], T]:
        chain: Runnable[list[BaseMessage], T]
        if structured:
            # The wire schema is a dict (closed label sets, bounded lengths), so LangChain
            # returns a plain dict and the lenient pydantic reading stays ours.
            wire = getattr(schema, "response_schema", None)
            response_format = {
                "name": schema.__name__,
                "schema": wire() if callable(wire) else schema.model_json_schema(),
            }
            model = self.model.with_structured_output(response_format, method="json_schema", include_raw=True)
            chain = model | RunnableLambda(lambda out: read_structured(out, schema))
        else:
            chain = self.model | RunnableLambda(lambda m: parse_reply(m, schema))
        return chain.with_retry(
            retry_if_exception_type=_transient,
            wait_exponential_jitter=self.cfg.backoff_s > 0,
            exponential_jitter_params={"initial": self.cfg.backoff_s, "max": 30.0, "jitter": self.cfg.backoff_s / 2},
            stop_after_attempt=self.cfg.max_retries + 1,
        )

    def _fallback(self, exc: BaseException) -> bool:
        """A server that refuses `response_format` gets plain-text prompts from now on."""
        if self._structured and self.cfg.structured == "auto" and classify(exc) == "refused":
            with self._lock:
                self._structured = False
            return True
        return False

    def say(self, messages: list[BaseMessage]) -> tuple[str, Usage]:
        """Free text (a reasoning phase), with the same retries; an empty reply is malformed."""
        meter = _Meter()

        def text(message: BaseMessage) -> str:
            out = message_text(message).strip()
            if not out:
                raise MalformedOutput("empty reply")
            return out

        chain = (self.model | RunnableLambda(text)).with_retry(
            retry_if_exception_type=_transient,
            wait_exponential_jitter=self.cfg.backoff_s > 0,
            exponential_jitter_params={"initial": self.cfg.backoff_s, "max": 30.0, "jitter": self.cfg.backoff_s / 2},
            stop_after_attempt=self.cfg.max_retries + 1,
        )
        try:
            result = chain.invoke(messages, config={"callbacks": [meter]})
        except Exception as exc:
            raise _failure(exc, meter.usage) from exc
        return result, meter.usage

    def ask(self, messages: list[BaseMessage], schema: type[T]) -> tuple[T, Usage]:
        meter = _Meter()
        config: RunnableConfig = {"callbacks": [meter]}
        try:
            try:
                result = self._runnable(schema, structured=self._structured).invoke(messages, config=config)
            except Exception as exc:
                if not self._fallback(exc):
                    raise
                result = self._runnable(schema, structured=False).invoke(messages, config=config)
        except Exception as exc:
            raise _failure(exc, meter.usage) from exc
        return result, meter.usage

    async def aask(self, messages: list[BaseMessage], schema: type[T]) -> tuple[T, Usage]:
        meter = _Meter()
        config: RunnableConfig = {"callbacks": [meter]}
        try:
            try:
                result = await self._runnable(schema, structured=self._structured).ainvoke(messages, config=config)
            except Exception as exc:
                if not self._fallback(exc):
                    raise
                result = await self._runnable(schema, structured=False).ainvoke(messages, config=config)
        except Exception as exc:
            raise _failure(exc, meter.usage) from exc
        return result, meter.usage


class FailedCall(LLMFailure):
    def __init__(self, kind: FailureKind, message: str, usage: Usage) -> None:
        super().__init__(kind, message)
        self.usage = usage


def _failure(exc: BaseException, usage: Usage) -> FailedCall:
    kind = classify(exc)
    words = {
        "timeout": "timed out",
        "rate_limit": "was rate-limited",
        "server": "failed with a server error",
        "malformed": "answered without the requested JSON",
        "refused": "refused the request",
        "error": "failed",
    }[kind]
    detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    if type(exc).__name__ == "LengthFinishReasonError":  # openai's parse path, under structured output
        detail = "the reply was cut off at the output token limit; raise [llm] max_output_tokens"
    return FailedCall(kind, f"the LLM {words} after {usage.calls} attempt(s): {detail}", usage)


def _supports_response_format(model: BaseChatModel) -> bool:
    """ChatOpenAI, except the model names LangChain would switch to tool calling (no json_schema)."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover
        return False
    if not isinstance(model, ChatOpenAI):
        return False
    name = model.model_name or ""
    return not (name.startswith(("gpt-3", "gpt-4-")) or name == "gpt-4")
