"""The FastAPI app: conversations with state, stateless screening, streams, operations.

`create_app()` builds everything from settings (no globals, nothing at import), so uvicorn's
workers (`create_app` as a factory), the tests and the benchmark make their own. The
detectors load after the server is up: `/healthz` answers at once, `/readyz` and the
turn endpoints wait for them (503 until then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from guardian.config import ServeSettings, settings
from guardian.detectors.base import Detector
from guardian.monitor import Monitor
from guardian.serve.auth import RateLimiter, TokenCheck
from guardian.serve.conversations import Conversations, IdempotencyMismatch, stored_summary
from guardian.serve.metrics import CONTENT_TYPE_LATEST, ServeMetrics
from guardian.serve.middleware import (
    Authenticated,
    BodyLimit,
    HostNames,
    Observed,
    TrustedHosts,
    loggable,
)
from guardian.serve.runtime import Runtime, ServiceError, check_screen, check_turn
from guardian.serve.schemas import (
    API_VERSION,
    ID_PATTERN,
    AssessmentEvent,
    ConversationOut,
    ErrorBody,
    Health,
    ScreenIn,
    TurnIn,
)
from guardian.serve.state import Conflict, StateStore, open_store

log = logging.getLogger("guardian.serve")


def runtime_of(request: Request) -> Runtime:
    rt: Runtime = request.app.state.guardian
    return rt


RuntimeDep = Annotated[Runtime, Depends(runtime_of)]


def client_of(request: Request, rt: RuntimeDep, authorization: Annotated[str | None, Header()] = None) -> str:
    """The client `Authenticated` admitted before the body was read; a route outside /v1/ admits here."""
    client: str | None = getattr(request.state, "client", None)
    if client is None:
        client = rt.admit(authorization, address=request.client.host if request.client else None)
        request.state.client = client
    return client


Client = Annotated[str, Depends(client_of)]
ConversationId = Annotated[str, Path(pattern=ID_PATTERN, description="your id for the conversation")]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 413, 422, 429, 503)
}


async def _load(rt: Runtime, given: Sequence[Detector] | None) -> None:
    """Load the detectors in a thread while the server already answers /healthz."""
    from guardian.watch import load_detectors

    try:
        if given is not None:
            detectors = list(given)
        else:
            detectors, problems = await asyncio.to_thread(load_detectors, None)
            for problem in problems:
                log.warning("detector %s unavailable: %s", problem.detector, problem.message)
        monitor = Monitor(detectors)
        monitor.subscribe(rt.metrics.observe)
        assert rt.store is not None
        rt.detectors, rt.monitor = detectors, monitor
        rt.conversations = Conversations(
            monitor, rt.store, metrics=rt.metrics, max_live=rt.config.max_live_conversations,
            log_text=rt.config.log_text,
        )
        rt.status = "ok"
        log.info("ready: detectors %s", ", ".join(d.name for d in detectors))
    except Exception as exc:
        rt.status, rt.failure = "failed", str(exc) or type(exc).__name__
        log.error("the detectors could not start: %s", rt.failure)


def create_app(
    config: ServeSettings | None = None,
    *,
    store: StateStore | None = None,
    detectors: Sequence[Detector] | None = None,
) -> FastAPI:
    """The service. Without arguments, everything comes from guardian's settings (`[serve]`)."""
    config = config or settings().serve
    metrics = ServeMetrics()
    rt = Runtime(
        config=config,
        metrics=metrics,
        tokens=TokenCheck(config.tokens),
        limiter=RateLimiter(rate=config.rate_per_s, burst=config.rate_burst),
        failures=RateLimiter(rate=config.auth_failure_rate_per_s, burst=config.auth_failure_burst),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt.store = store if store is not None else open_store(config.state_url)
        loader = asyncio.create_task(_load(rt, detectors))
        try:
            yield
        finally:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loader
            await _shutdown(rt)

    app = FastAPI(
        title="guardian",
        summary="Says, turn by turn, whether someone in a conversation is being manipulated, how, and quotes the words.",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.guardian = rt
    _errors(app)
    _routes(app)
    from guardian.serve.streams import add_stream_routes

    add_stream_routes(app)
    # the audio pipeline's code loads here; its models load on the first call
    from guardian.serve.audio import add_call_routes

    add_call_routes(app)
    # the last added runs first: log everything, then refuse foreign hosts, then strangers, then large bodies
    app.add_middleware(BodyLimit, max_bytes=config.max_request_bytes)
    app.add_middleware(Authenticated, runtime=rt)
    app.add_middleware(TrustedHosts, hosts=HostNames.of(bind_host=config.host, allowed=config.allowed_hosts))
    app.add_middleware(Observed, metrics=metrics)
    return app


async def _shutdown(rt: Runtime) -> None:
    """Drain in-flight turns (uvicorn has stopped accepting), then close calls, monitor and store."""
    timeout = rt.config.shutdown_timeout_s
    if rt.calls is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rt.calls.aclose(), timeout)
    if rt.conversations is not None:
        try:
            await asyncio.wait_for(rt.conversations.drain(), timeout)
        except TimeoutError:
            log.warning("shutdown: turns still in flight after %g s", timeout)
        await rt.conversations.aclose()
    if rt.monitor is not None:
        await rt.monitor.aclose()
    if rt.store is not None:
        rt.store.close()


def _version() -> str:
    from guardian import __version__

    return __version__


def _errors(app: FastAPI) -> None:
    def body(status: int, code: str, message: str, headers: dict[str, str] | None = None,
             detail: Any = None) -> JSONResponse:
        return JSONResponse({"error": code, "message": message, "detail": detail}, status_code=status,
                            headers=headers)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return body(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
        message = f"{where}: {first.get('msg', 'invalid')}".replace("\n", " ")
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in errors]
        return body(422, "invalid", message, detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return body(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s: %s: %s", loggable(request.method, limit=20), loggable(request.url.path),
                  type(exc).__name__, loggable(str(exc), limit=2000))
        return body(500, "internal", "the service failed on this request; it has been logged")


def _routes(app: FastAPI) -> None:
    from guardian.analyze import AnalyzeReport  # the screen's answer, for the OpenAPI document

    @app.get("/healthz", response_model=Health, tags=["operations"])
    async def healthz() -> Health:
        """The process answers (liveness)."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["operations"], responses={503: {"model": Health}})
    async def readyz(rt: RuntimeDep) -> Any:
        """The detectors are loaded and the store answers (readiness)."""
        if rt.status != "ok":
            message = rt.failure or "loading the detectors"
            return JSONResponse(Health(status="failed" if rt.failure else "starting", message=message).model_dump(),
                                status_code=503)
        try:
            assert rt.store is not None
            await asyncio.to_thread(rt.store.ping)
        except Exception as exc:
            return JSONResponse(Health(status="failed", message=f"the store does not answer ({exc})").model_dump(),
                                status_code=503)
        return Health(status="ok", detectors=[d.name for d in rt.detectors])

    @app.get("/metrics", tags=["operations"], response_class=Response)
    async def metrics(rt: RuntimeDep) -> Response:
        """Prometheus metrics of this process."""
        return Response(rt.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/conversations/{conversation_id}/turns", tags=["conversations"],
              responses={200: {"model": AssessmentEvent}, **_ERRORS})
    async def add_turn(
        conversation_id: ConversationId,
        turn: TurnIn,
        rt: RuntimeDep,
        client: Client,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    ) -> JSONResponse:
        """Add one turn and answer with the assessment after it (the `assessment` event of
        `guardian watch --headless`). Send an `Idempotency-Key` to retry safely: the same key
        answers the stored assessment and the turn is not counted again."""
        check_turn(rt, turn)
        conversations = rt.require()
        try:
            result = await conversations.add_turn(conversation_id, turn, idempotency_key=idempotency_key)
        except IdempotencyMismatch:
            raise ServiceError(409, "idempotency_mismatch",
                               "this Idempotency-Key was used for a different turn; use a new key") from None
        except Conflict:
            raise ServiceError(409, "conflict", "the conversation kept changing; retry the turn",
                               headers={"Retry-After": "1"}) from None
        headers = {"Idempotent-Replayed": "true"} if result.replayed else None
        return JSONResponse(result.response, headers=headers)

    @app.get("/v1/conversations/{conversation_id}", response_model=ConversationOut, tags=["conversations"],
             responses=_ERRORS)
    async def get_conversation(conversation_id: ConversationId, rt: RuntimeDep, client: Client) -> Any:
        """The conversation's turns and its latest assessment."""
        conversations = rt.require()
        stored = await conversations.get(conversation_id)
        if not stored:
            raise ServiceError(404, "not_found", f"no conversation {conversation_id!r} is stored")
        events = [e for t in stored for e in t.events]
        turns = [e["turn"] for e in events if e["type"] == "turn"]
        latest = stored[-1].response
        summary = stored_summary(conversation_id, events)
        return JSONResponse({"api_version": API_VERSION, "id": conversation_id, "turns": turns, "latest": latest,
                             "risk": latest["risk"], "summary": summary.model_dump(mode="json")})

    @app.delete("/v1/conversations/{conversation_id}", status_code=204, tags=["conversations"],
                responses=_ERRORS)
    async def delete_conversation(conversation_id: ConversationId, rt: RuntimeDep, client: Client) -> Response:
        """Forget the conversation: its turns and assessments leave the store and memory."""
        await rt.require().delete(conversation_id)
        return Response(status_code=204)

    @app.post("/v1/screen", tags=["screening"], responses={200: {"model": AnalyzeReport}, **_ERRORS})
    async def screen(body: ScreenIn, rt: RuntimeDep, client: Client) -> JSONResponse:
        """Screen a whole conversation at once (nothing stored): the `guardian analyze --format
        json` report, one assessment per turn, with the risk after each, the per-speaker summary
        and what the person can do (the same document `analyze` writes)."""
        from guardian.analyze import analyze_report, assess_turns
        from guardian.conversation import Conversation, Turn

        check_screen(rt, len(body.turns))
        for turn in body.turns:
            check_turn(rt, turn)
        conversations = rt.require()
        conversation = Conversation(
            id=body.id,
            turns=tuple(Turn(index=i, speaker=t.speaker, text=t.text, start=t.start, end=t.end)
                        for i, t in enumerate(body.turns)),
        )
        window = conversations.monitor.window
        began = time.perf_counter()
        assessments = await asyncio.to_thread(assess_turns, conversation, rt.detectors, window=window)
        rt.metrics.assessment.observe((time.perf_counter() - began) / len(conversation.turns))
        report = analyze_report(conversation, rt.detectors, assessments, guardian_version=_version())
        return JSONResponse(report.model_dump(mode="json"))
