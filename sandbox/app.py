"""The sandbox email API as an aiohttp application, with faults: the email API of
docs/reference/contract.md#email-api.

Provider endpoints (``Authorization: Bearer <api_key>``):

* ``POST /v1/send`` -- needs ``Idempotency-Key`` and a JSON body ``{"to", "template",
  "variables"}``; applies the plan's latency and fault, then answers ``200 {"id": ...}``.
  The same key always gets the same id, minted once. 429 carries ``Retry-After`` (seconds).
* ``GET /v1/messages?idempotency_key=K`` -- ``200 {"id": ..., "idempotency_key": K}`` if
  accepted under K, else 404.

Named providers' send endpoints, each provider folder's imitation (``providers/<name>/
sandbox/``, found by :mod:`mailbus.sandbox.imitations`) in its dialect, with the same
faults and ledger: ``POST /emails`` (Resend), ``POST /email`` and ``GET
/messages/outbound`` (Postmark, ``X-Postmark-Server-Token``), ``POST /v3/mail/send``
(SendGrid), ``POST /v3/{domain}/messages`` (Mailgun).

Control endpoints (no auth; loopback clients only unless ``open_control``):
``GET /_sandbox/health``, ``GET /_sandbox/ledger``, ``GET /_sandbox/requests[?since=T]``,
``GET|POST /_sandbox/faults`` (read or replace the plan), ``POST /_sandbox/reset``,
``POST /_sandbox/idempotency`` (a key window), ``POST /_sandbox/search`` (a search lag),
``GET /_sandbox/events`` (what the delivery-event emitter sent, when there is one),
``GET|POST /_sandbox/account`` (the API keys accepted, a spent sending quota:
:mod:`mailbus.sandbox.account`).

With an emitter (:mod:`mailbus.sandbox.emitter`), every newly accepted message gets signed
delivery events posted to the receiver: mailbus's own, or those of the provider whose
dialect accepted it, signed that provider's way.

Order of checks for a send: auth (the dialect's bad-key reply), Idempotency-Key (400), body
(400), a spent quota (the dialect's quota reply), then the fault
is chosen and the delay slept. A send that is slow is still accepted after its delay even
if the client gave up: the provider processed it, the client cannot know (an *unknown*
outcome). A hang ends early when the client closes the connection. Lookups get neither
latency nor faults.

Postmark's search is as unkind as its documentation allows
(https://postmarkapp.com/developer/api/messages-api documents neither a delay nor how a
``metadata_`` filter matches): a mail shows in it only ``search_lag_s`` after it was
accepted (``POST /_sandbox/search {"lag_s": S}``; 0 by default), and the filter matches
ignoring case and as a prefix, so ``order-1`` also finds ``Order-1`` and ``order-10``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import random
from collections.abc import Awaitable, Callable

from aiohttp import web

from mailbus.providers.sandbox.dialect import Dialect, LookupRoute
from mailbus.sandbox.account import Account, read_account
from mailbus.sandbox.emitter import EventEmitter
from mailbus.sandbox.faults import Fault, FaultPlan, FaultSpecError, choose_fault, plan_from_dict
from mailbus.sandbox.imitations import imitations
from mailbus.sandbox.ledger import Ledger, RequestRecord

__all__ = ["DEFAULT_API_KEY", "STATE", "SandboxState", "make_app"]

DEFAULT_API_KEY = "sandbox-key"
OWN = Dialect()  # the sandbox's own API (docs/reference/contract.md#email-api)


class SandboxState:
    """Everything the handlers share: credentials, the current plan, its rng, the ledger."""

    def __init__(
        self,
        api_key: str,
        plan: FaultPlan | None = None,
        seed: int | None = None,
        *,
        open_control: bool = False,
        emitter: EventEmitter | None = None,
    ) -> None:
        self.emitter = emitter
        self.api_key = api_key
        self.account = Account.starting_with(api_key)  # the keys accepted, the quota
        self.idempotency_window_s: float | None = None  # None: a key is kept for good
        self.search_lag_s = 0.0  # Postmark's search shows a mail this long after accepting it
        self.plan = plan if plan is not None else FaultPlan()
        self.seed = seed
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        self.open_control = open_control
        self.closing = False  # set on shutdown: hangs end at once

    def reset(self) -> None:
        """Empty the plan and the ledger; re-seed the rng."""
        self.plan = FaultPlan()
        self.rng = random.Random(self.seed)
        self.ledger.reset()
        self.idempotency_window_s = None
        self.search_lag_s = 0.0
        self.account.reset()

    def authorized(self, request: web.Request, dialect: Dialect) -> bool:
        """Whether the request carries a key the account accepts, the dialect's way."""
        return any(dialect.authorized(request, key) for key in self.account.keys)


STATE = web.AppKey("sandbox_state", SandboxState)


def _error(status: int, code: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status, headers=headers)


def _drop(request: web.Request) -> web.Response:
    """Close the connection without answering (the returned response is never written)."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=204)


async def _hang(request: web.Request, state: SandboxState, seconds: float) -> None:
    """Hold the connection unanswered for ``seconds``, until the client goes or we stop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        transport = request.transport
        if transport is None or transport.is_closing() or state.closing:
            return
        await asyncio.sleep(min(0.05, left))


def _send_handler(dialect: Dialect) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def send(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        record = state.ledger.arrive(dialect.key_of(request))
        try:
            return await _handle_send(request, state, record, dialect)
        finally:
            state.ledger.depart()

    return send


_AFTER_ACCEPT = frozenset(
    {"drop_after_accept", "hang_after_accept", "malformed", "500_after_accept"}
)


async def _handle_send(
    request: web.Request, state: SandboxState, record: RequestRecord, dialect: Dialect
) -> web.StreamResponse:
    ledger = state.ledger
    if not state.authorized(request, dialect):
        ledger.settle(record, "unauthorized")
        return dialect.refused_key()
    body = await request.read()
    if dialect.key_required and not request.headers.get("Idempotency-Key"):
        ledger.settle(record, "bad_request")
        return dialect.error(400, "bad_request", "the Idempotency-Key header is required")
    parsed = dialect.parse(request, body)
    if isinstance(parsed, str):
        ledger.settle(record, "bad_request")
        return dialect.error(400, "bad_request", parsed)
    record.to = parsed.to
    if state.account.quota_retry_after is not None:
        ledger.settle(record, "quota")
        return dialect.quota_spent(state.account.quota_retry_after)
    domain = parsed.to.rpartition("@")[2].lower()
    choice = choose_fault(state.plan, state.rng, domain)
    state.plan = choice.plan
    if choice.delay_ms > 0:
        await asyncio.sleep(choice.delay_ms / 1000)
    fault: Fault | None = choice.fault
    kind = fault.kind if fault is not None else None
    if kind is not None and kind not in _AFTER_ACCEPT:
        ledger.settle(record, kind)
        if kind == "429":
            assert fault is not None
            return dialect.rate_limited(fault.retry_after, fault.domain)
        if kind == "503":
            return dialect.error(503, "unavailable", "service unavailable, try again later")
        if kind == "422":
            return dialect.error(422, "unprocessable", "the message was rejected")
        return _drop(request)  # drop_before_accept
    # a provider without idempotency keys: a request is a new mail under its name (tag)
    message_id, minted = ledger.accept(
        parsed.key if parsed.key is not None else parsed.tag,
        to=parsed.to,
        template=parsed.template,
        window_s=state.idempotency_window_s,
        replay=dialect.deduplicates and parsed.key is not None,
        provider_template=parsed.provider_template,
        template_data=parsed.template_data,
    )
    if minted and state.emitter is not None:
        state.emitter.accepted(message_id, parsed.to, dialect.name)
    if kind is None:
        ledger.settle(record, "accepted" if minted else "replayed")
        return dialect.accepted(message_id)
    ledger.settle(record, kind)
    if kind == "malformed":
        return dialect.malformed(message_id)
    if kind == "500_after_accept":
        return dialect.error(500, "internal", "internal server error")
    if kind == "hang_after_accept":
        assert fault is not None
        await _hang(request, state, fault.hang_seconds)
    return _drop(request)


async def _lookup(request: web.Request) -> web.Response:
    state = request.app[STATE]
    ledger = state.ledger
    key = request.query.get("idempotency_key") or None
    record = ledger.arrive(key, "lookup")
    try:
        if not state.authorized(request, OWN):
            ledger.settle(record, "unauthorized")
            return OWN.refused_key()
        if key is None:
            ledger.settle(record, "bad_request")
            return _error(400, "bad_request", "the idempotency_key parameter is required")
        message_id = ledger.lookup(key)
        if message_id is None:
            ledger.settle(record, "not_found")
            return _error(404, "not_found", "nothing accepted under this key")
        ledger.settle(record, "found")
        return web.json_response({"id": message_id, "idempotency_key": key})
    finally:
        ledger.depart()


def _lookup_handler(route: LookupRoute) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def lookup(request: web.Request) -> web.Response:
        return await route(request, request.app[STATE])

    return lookup


_ControlHandler = Callable[[web.Request, SandboxState], Awaitable[web.Response]]


def _control(handler: _ControlHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def guarded(request: web.Request) -> web.Response:
        state = request.app[STATE]
        if not (state.open_control or _is_loopback(request.remote)):
            return _error(403, "forbidden", "control endpoints answer loopback clients only")
        return await handler(request, state)

    return guarded


def _is_loopback(remote: str | None) -> bool:
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


async def _health(request: web.Request, state: SandboxState) -> web.Response:
    return web.json_response({"status": "ok"})


async def _ledger(request: web.Request, state: SandboxState) -> web.Response:
    return web.json_response(state.ledger.snapshot())


async def _requests(request: web.Request, state: SandboxState) -> web.Response:
    try:
        since = float(request.query["since"]) if "since" in request.query else None
    except ValueError:
        return _error(400, "bad_request", "since must be unix seconds")
    return web.json_response(state.ledger.request_log(since))


async def _get_faults(request: web.Request, state: SandboxState) -> web.Response:
    return web.json_response(state.plan.to_dict())


async def _set_faults(request: web.Request, state: SandboxState) -> web.Response:
    try:
        state.plan = plan_from_dict(json.loads(await request.read()))
    except (ValueError, FaultSpecError) as exc:
        return _error(400, "bad_request", str(exc))
    return web.json_response(state.plan.to_dict())


async def _events(request: web.Request, state: SandboxState) -> web.Response:
    if state.emitter is None:
        return _error(404, "not_found", "no delivery events configured (--events-to)")
    return web.json_response(state.emitter.snapshot())


async def _set_idempotency(request: web.Request, state: SandboxState) -> web.Response:
    """``{"window_s": S}``: a key older than S seconds (from its first acceptance) is
    forgotten, as a real provider's is, and a send under it is a new mail; null: never."""
    try:
        window = json.loads(await request.read()).get("window_s")
        if window is not None and not (isinstance(window, int | float) and window > 0):
            raise ValueError("window_s must be a number > 0 or null")
    except (ValueError, AttributeError) as exc:
        return _error(400, "bad_request", str(exc))
    state.idempotency_window_s = None if window is None else float(window)
    return web.json_response({"window_s": state.idempotency_window_s})


async def _set_search(request: web.Request, state: SandboxState) -> web.Response:
    """``{"lag_s": S}``: Postmark's search shows a mail only S seconds after accepting it."""
    try:
        lag = json.loads(await request.read()).get("lag_s")
        if not (isinstance(lag, int | float) and lag >= 0):
            raise ValueError("lag_s must be a number >= 0")
    except (ValueError, AttributeError) as exc:
        return _error(400, "bad_request", str(exc))
    state.search_lag_s = float(lag)
    return web.json_response({"lag_s": state.search_lag_s})
async def _get_account(request: web.Request, state: SandboxState) -> web.Response:
    return web.json_response(state.account.to_dict())


async def _set_account(request: web.Request, state: SandboxState) -> web.Response:
    try:
        read_account(state.account, json.loads(await request.read()))
    except ValueError as exc:
        return _error(400, "bad_request", str(exc))
    return web.json_response(state.account.to_dict())


async def _reset(request: web.Request, state: SandboxState) -> web.Response:
    state.reset()
    return web.json_response({"status": "reset"})


def make_app(state: SandboxState) -> web.Application:
    """The aiohttp application serving ``state``."""
    app = web.Application()
    app[STATE] = state
    app.router.add_post("/v1/send", _send_handler(OWN))
    app.router.add_get("/v1/messages", _lookup)
    for imitation in imitations().values():  # each provider folder's sandbox/
        for path, dialect in imitation.sends.items():
            app.router.add_post(path, _send_handler(dialect))
        for path, route in imitation.lookups.items():
            app.router.add_get(path, _lookup_handler(route))
    app.router.add_get("/_sandbox/health", _control(_health))
    app.router.add_get("/_sandbox/ledger", _control(_ledger))
    app.router.add_get("/_sandbox/requests", _control(_requests))
    app.router.add_get("/_sandbox/faults", _control(_get_faults))
    app.router.add_post("/_sandbox/faults", _control(_set_faults))
    app.router.add_post("/_sandbox/reset", _control(_reset))
    app.router.add_post("/_sandbox/idempotency", _control(_set_idempotency))
    app.router.add_post("/_sandbox/search", _control(_set_search))
    app.router.add_get("/_sandbox/events", _control(_events))
    app.router.add_get("/_sandbox/account", _control(_get_account))
    app.router.add_post("/_sandbox/account", _control(_set_account))
    return app
