"""One conformance suite every provider adapter passes, against its sandbox dialect.

Watermill's way (docs/architecture.md#providers-as-adapters): the same cases, parametrized
over every HTTP dialect (the own API's and each provider folder's, found by
mailbus.providers.registry) -- accepted, 4xx, 5xx, 429 with Retry-After, a timeout after
acceptance, a malformed 2xx, and the way doubt is settled (a look-up, a resend under the
same key, or -- a provider with neither -- not at all: the one mail stays the one mail,
at most once), a revoked key and a spent quota (the provider's documented replies, each
the account's state, never the mail's) -- each classified into the same outcomes, and
ending with what the sandbox accepted agreeing with what the adapter reported. No stack
services needed.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from mailbus.consumer.core.capability import Guarantee, guarantee_of, without_cover
from mailbus.consumer.core.outcome import ACCOUNT, QUOTA, Outcome, classify
from mailbus.consumer.provider import (
    Dialect,
    HttpProvider,
    LookupResult,
    MailbusDialect,
    OutgoingMail,
)
from mailbus.consumer.templates import ProviderTemplate, Rendered
from mailbus.kernel.provider_key import provider_key
from mailbus.kernel.settings import load_settings
from mailbus.providers.registry import named
from mailbus.sandbox.app import SandboxState
from mailbus.sandbox.faults import build_plan
from mailbus.sandbox.server import ThreadedSandbox, start_in_thread

API_KEY = "conformance-key-0123456789"
MAIL = OutgoingMail(
    "order-7-confirmation", "ana@example.com", "order_confirmation", {"subject": "Order 7"}
)
# the own API's dialect and every provider folder's (mailbus.providers.registry)
SETTINGS = replace(
    load_settings({}), mail_from="shop@mg.example.com", mailgun_domain="mg.example.com"
)
ADAPTERS: dict[str, Callable[[], Dialect]] = {"http": MailbusDialect} | {
    name: functools.partial(entry.dialect, SETTINGS)
    for name, entry in named().items()
    if entry.dialect is not None
}
_T = TypeVar("_T")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ThreadedSandbox]:
    with start_in_thread(api_key=API_KEY, seed=3) as server:
        yield server


@pytest.fixture(params=sorted(ADAPTERS))
def dialect(request: pytest.FixtureRequest, sandbox: ThreadedSandbox) -> Dialect:
    sandbox.call(lambda state: state.reset())
    return ADAPTERS[str(request.param)]()


def call(
    sandbox: ThreadedSandbox,
    dialect: Dialect,
    scenario: Callable[[HttpProvider], Awaitable[_T]],
    faults: tuple[str, ...] = (),
) -> _T:
    plan = build_plan(faults)

    def apply(state: SandboxState) -> None:
        state.plan = plan

    sandbox.call(apply)

    async def main() -> _T:
        provider = HttpProvider(sandbox.url, API_KEY, 0.5, 0.8, max_connections=4, dialect=dialect)
        try:
            return await scenario(provider)
        finally:
            await provider.aclose()

    return asyncio.run(main())


def send_once(sandbox: ThreadedSandbox, dialect: Dialect, *faults: str) -> Any:
    return classify(call(sandbox, dialect, lambda p: p.send(MAIL), faults))  # type: ignore[arg-type]


def accepted_by_sandbox(sandbox: ThreadedSandbox) -> dict[str, tuple[int, str | None]]:
    keys = sandbox.call(lambda state: state.ledger.snapshot())["keys"]
    return {k: (v["accepted"], v["id"]) for k, v in keys.items() if v["accepted"]}


def test_accepted_carries_the_providers_id(sandbox: ThreadedSandbox, dialect: Dialect) -> None:
    result = send_once(sandbox, dialect)
    assert result.outcome is Outcome.ACCEPTED
    assert accepted_by_sandbox(sandbox) == {MAIL.key: (1, result.message_id)}


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [("422", Outcome.REJECTED), ("503", Outcome.RETRY), ("malformed", Outcome.UNKNOWN)],
)
def test_4xx_5xx_and_a_malformed_2xx(
    sandbox: ThreadedSandbox, dialect: Dialect, fault: str, outcome: Outcome
) -> None:
    result = send_once(sandbox, dialect, f"{fault}:next=1")
    assert result.outcome is outcome, result
    accepted = accepted_by_sandbox(sandbox)
    assert bool(accepted) == (fault == "malformed")  # a garbled 2xx was accepted all the same
    assert "conformance-key" not in result.reason  # the API key never shows


def test_429_carries_retry_after(sandbox: ThreadedSandbox, dialect: Dialect) -> None:
    result = send_once(sandbox, dialect, "429:next=1:retry_after=7")
    assert (result.outcome, result.status_code) == (Outcome.RETRY, 429)
    # a reset time (SendGrid: Unix seconds; Mailgun: an HTTP-date) rounds to the second
    assert result.retry_after_s == pytest.approx(6.5, abs=0.5)


def test_doubt_after_a_timeout_is_settled_without_a_second_mail(
    sandbox: ThreadedSandbox, dialect: Dialect
) -> None:
    """A timeout after acceptance is unknown; then the adapter's own way of settling doubt
    -- a look-up, or a resend under the same key -- finds the one mail, never makes two. A
    provider with neither settles nothing: at most once, the one mail (an operator's)."""

    async def scenario(provider: HttpProvider) -> tuple[Any, Any]:
        lost = classify(await provider.send(MAIL))
        if provider.capability.look_up:
            found = await provider.lookup(MAIL.key)
            return lost, found.message_id
        if provider.capability.key is None:
            assert guarantee_of(provider.capability, False) is Guarantee.AT_MOST_ONCE
            assert (await provider.lookup(MAIL.key)).failed
            await asyncio.sleep(0.3)  # the sandbox records the mail it kept working on
            return lost, sandbox.call(lambda s: s.ledger.lookup(MAIL.key))
        again = classify(await provider.send(MAIL))
        return lost, again.message_id

    lost, settled_id = call(
        sandbox, dialect, scenario, ("hang_after_accept:next=1:hang_seconds=3",)
    )
    assert lost.outcome is Outcome.UNKNOWN
    assert accepted_by_sandbox(sandbox) == {MAIL.key: (1, settled_id)}


RENDERED = replace(MAIL, content=Rendered("Order 7 confirmed", "Your order ships.", "<p>7</p>"))
BY_REFERENCE = replace(
    MAIL,
    variables={"order_id": "7", "headers": {"X-Campaign": "c1"}},
    content=ProviderTemplate("order-confirmation-v2"),
)


def test_a_locally_rendered_mail_is_accepted(sandbox: ThreadedSandbox, dialect: Dialect) -> None:
    """A mail rendered from a local template travels in every dialect's own shape."""
    result = classify(call(sandbox, dialect, lambda p: p.send(RENDERED)))  # type: ignore[arg-type]
    assert result.outcome is Outcome.ACCEPTED, result
    assert accepted_by_sandbox(sandbox) == {MAIL.key: (1, result.message_id)}


@pytest.mark.parametrize("name", ["postmark", "sendgrid"])
@pytest.mark.parametrize("fault", ["", "503:next=1", "hang_after_accept:next=1:hang_seconds=3"])
def test_a_provider_template_goes_by_reference(
    sandbox: ThreadedSandbox, name: str, fault: str
) -> None:
    """Postmark's template alias and SendGrid's dynamic template: the dialect sends the
    reference and the variables (never a subject or body), the faults work there too, and
    the sandbox's ledger records what was sent."""
    sandbox.call(lambda state: state.reset())
    result = classify(
        call(sandbox, ADAPTERS[name](), lambda p: p.send(BY_REFERENCE), (fault,) if fault else ())  # type: ignore[arg-type]
    )
    expected = {"": Outcome.ACCEPTED, "503": Outcome.RETRY}.get(fault[:3], Outcome.UNKNOWN)
    assert result.outcome is expected, result
    if expected is Outcome.RETRY:
        assert accepted_by_sandbox(sandbox) == {}
        return
    if fault:
        time.sleep(0.3)  # the sandbox records the mail it kept working on
    keys = sandbox.call(lambda state: state.ledger.snapshot())["keys"]
    assert keys[MAIL.key]["accepted"] == 1
    assert keys[MAIL.key]["provider_template"] == "order-confirmation-v2"
    assert keys[MAIL.key]["template_data"] == {"order_id": "7"}


def test_each_life_and_each_deployment_is_a_mail_of_its_own(
    sandbox: ThreadedSandbox, dialect: Dialect
) -> None:
    """docs/providers.md#the-key-the-provider-sees: the key enqueued again after retention
    (``~2``) and the same key of another deployment (its prefix) are new mails at every
    provider, and a look-up finds each under its own key, never the other's."""
    keys = [
        provider_key("", "order-7", 1),
        provider_key("", "order-7", 2),
        provider_key("staging:", "order-7", 1),
    ]

    async def scenario(provider: HttpProvider) -> list[tuple[str | None, str | None]]:
        found = []
        for key in keys:
            sent = classify(await provider.send(replace(MAIL, key=key)))
            assert sent.outcome is Outcome.ACCEPTED, sent
            looked = await provider.lookup(key) if provider.capability.look_up else None
            found.append((sent.message_id, looked.message_id if looked else sent.message_id))
        return found

    found = call(sandbox, dialect, scenario)
    ids = [sent for sent, _ in found]
    assert len(set(ids)) == 3  # three mails, none answered with another's id
    assert [looked for _, looked in found] == ids
    assert accepted_by_sandbox(sandbox) == {
        key: (1, message_id) for key, message_id in zip(keys, ids, strict=True)
    }


def test_a_500_after_acceptance_is_a_retry_only_under_a_key_kept_for_good(
    sandbox: ThreadedSandbox, dialect: Dialect
) -> None:
    """A 500 that follows acceptance (sandbox fault ``500_after_accept``, the dialect's own
    error body): a retry is safe only under a key the provider keeps for good; at a
    provider without a key, or whose key expires, it is in doubt (review 2026-12-06 #2,
    #4), and a look-up -- where there is one -- finds the one mail."""

    async def scenario(provider: HttpProvider) -> tuple[Any, Any]:
        result = without_cover(provider.capability, classify(await provider.send(MAIL)))
        found = await provider.lookup(MAIL.key) if provider.capability.look_up else None
        return result, found

    result, found = call(sandbox, dialect, scenario, ("500_after_accept:next=1",))
    key = dialect.capability.key
    kept_for_good = key is not None and key.window_s is None
    assert result.outcome is (Outcome.RETRY if kept_for_good else Outcome.UNKNOWN), result
    assert result.status_code == 500
    ((accepted, message_id),) = accepted_by_sandbox(sandbox).values()
    assert accepted == 1
    if found is not None:
        assert (found.message_id, found.failed) == (message_id, False)


def test_postmarks_search_is_believed_only_for_our_key_and_after_its_lag(
    sandbox: ThreadedSandbox,
) -> None:
    """The sandbox's Postmark search shows a mail only after a lag and matches loosely
    (ignoring case, by prefix), as Postmark's documentation allows: a search right after
    the send finds nothing yet; mails under ``Order-7-confirmation`` and
    ``order-7-confirmation-2`` are never taken for ``order-7-confirmation``."""
    sandbox.call(lambda state: state.reset())
    dialect = ADAPTERS["postmark"]()

    def lag(seconds: float) -> Callable[[SandboxState], None]:
        def apply(state: SandboxState) -> None:
            state.search_lag_s = seconds

        return apply

    async def strangers(provider: HttpProvider) -> Any:
        for key in ("Order-7-confirmation", "order-7-confirmation-2"):
            assert classify(await provider.send(replace(MAIL, key=key))).message_id
        return await provider.lookup(MAIL.key)

    assert call(sandbox, dialect, strangers) == LookupResult(None, False)
    sandbox.call(lag(0.5))

    async def lagging(provider: HttpProvider) -> tuple[Any, Any, Any]:
        sent = classify(await provider.send(MAIL))
        early = await provider.lookup(MAIL.key)
        await asyncio.sleep(0.6)
        return sent, early, await provider.lookup(MAIL.key)

    sent, early, late = call(sandbox, dialect, lagging)
    assert early == LookupResult(None, False)  # not there yet: the settle time's reason
    assert (late.message_id, late.failed) == (sent.message_id, False)
    sandbox.call(lag(0.0))


# what each dialect's spent quota is (docs/providers.md#account-sender-and-quota-replies):
# Postmark and Mailgun document no quota reply, so the sandbox answers their account refusal
QUOTA_STATE = {"http": QUOTA, "resend": QUOTA, "sendgrid": QUOTA, "postmark": ACCOUNT}


def test_a_revoked_key_is_the_providers_state_and_a_rotated_one_sends(
    sandbox: ThreadedSandbox, dialect: Dialect
) -> None:
    """The sandbox revokes our key: every dialect answers its provider's documented bad-key
    reply, which the adapter reads as the account's state (a retry, no attempt spent, the
    breaker fed), never as a verdict on the mail; once the key is accepted again, the mail
    is accepted once."""

    def revoke(state: SandboxState) -> None:
        state.account.keys = frozenset({"the-rotated-key-0987654321"})

    sandbox.call(revoke)
    refused = send_once(sandbox, dialect)
    assert (refused.outcome, refused.server_stage) == (Outcome.RETRY, ACCOUNT), refused
    assert accepted_by_sandbox(sandbox) == {}
    sandbox.call(lambda state: state.account.reset())
    result = send_once(sandbox, dialect)
    assert result.outcome is Outcome.ACCEPTED
    assert accepted_by_sandbox(sandbox) == {MAIL.key: (1, result.message_id)}


def test_a_spent_quota_is_the_providers_state(sandbox: ThreadedSandbox, dialect: Dialect) -> None:
    def spend(state: SandboxState) -> None:
        state.account.quota_retry_after = 600

    sandbox.call(spend)
    refused = send_once(sandbox, dialect)
    name = next(n for n, make in ADAPTERS.items() if isinstance(dialect, type(make())))
    assert (refused.outcome, refused.server_stage) == (
        Outcome.RETRY,
        QUOTA_STATE.get(name, ACCOUNT),
    ), refused
    assert accepted_by_sandbox(sandbox) == {}
