"""MAILBUS_FALLBACK_PROVIDER: the fallback may be any named provider, sent under its own
capability (an idempotency key and its window, a look-up, or neither), and a mail is never
accepted by two: its route is fixed by its first claim (docs/providers.md#the-fallback-provider)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core.breaker import BreakerState
from mailbus.consumer.core.decide import SendView
from mailbus.consumer.core.states import Status
from mailbus.consumer.ledger import LoadedSend
from mailbus.consumer.routing import Routing
from mailbus.consumer.runner import _fallback_provider, _process_provider
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.send_routes import FALLBACK
from mailbus.kernel.settings import Settings, load_settings
from mailbus.providers.registry import senders
from mailbus_client.policies import configured_policy_book

NOW = datetime(2026, 12, 6, 14, 0, tzinfo=UTC)
ALERT = SendView(1, "alert-1", "ops@example.com", "internal_alert", "p1", Status.PENDING, 0)
PRIMARY: Any = object()
SECOND: Any = object()


def routing(breaker: BreakerState, primary_kind: str = "sendgrid") -> Routing:
    gate: Any = SimpleNamespace(breaker=SimpleNamespace(state=breaker), admits=lambda: True)
    second: Any = SimpleNamespace(admits=lambda: True)  # the fallback's breaker: closed
    book = configured_policy_book()
    return Routing(PRIMARY, None, SECOND, book, gate, second, "postmark", primary_kind)


def loaded(view: SendView, provider: str | None = None, kind: str | None = None) -> LoadedSend:
    return LoadedSend(view, {}, None, provider, provider_kind=kind)


def test_a_first_try_of_fallback_mail_goes_to_the_fallback_while_the_primary_is_down() -> None:
    assert routing(BreakerState.OPEN).route(loaded(ALERT)) == "fallback:postmark"
    assert routing(BreakerState.CLOSED).route(loaded(ALERT)) is None
    order = replace(ALERT, template="order_confirmation")  # its policy waits
    assert routing(BreakerState.OPEN).route(loaded(order)) is None


@pytest.mark.parametrize(
    "tried",
    [
        {"attempts": 1, "first_tried_at": NOW, "in_doubt_since": NOW},  # in doubt at the primary
        {"attempts": 1, "first_tried_at": NOW},  # a retry after a definite 503
        # the primary's call was refused as our account's (attempt handed back), or the
        # claim was handed back for want of a slot, or a dead letter replayed (attempts 0)
        {"attempts": 0, "first_tried_at": NOW},
        {"attempts": 0, "first_tried_at": NOW, "in_doubt_since": NOW},
    ],
)
def test_a_mail_claimed_by_the_primary_is_never_offered_to_the_fallback(
    tried: dict[str, Any],
) -> None:
    row = replace(ALERT, **tried)
    assert routing(BreakerState.OPEN).route(loaded(row, None)) is None


def test_a_mail_claimed_by_the_fallback_stays_there_when_the_primary_recovers() -> None:
    row = replace(ALERT, attempts=0, first_tried_at=NOW)  # e.g. the fallback's quota refused it
    taken = routing(BreakerState.CLOSED).route(loaded(row, "fallback:postmark"))
    assert taken == "fallback:postmark"


def test_a_mail_another_kind_of_fallback_took_has_no_provider_here() -> None:
    """Consumers restarted with MAILBUS_FALLBACK_PROVIDER=postmark: a mail a SendGrid
    fallback took is neither looked up nor sent at Postmark; one recorded before the kind
    was (``fallback``) is the configured fallback's."""
    row = replace(ALERT, attempts=1, first_tried_at=NOW, in_doubt_since=NOW)
    here = routing(BreakerState.CLOSED)
    assert here.provider_for(here.route(loaded(row, "fallback:sendgrid"))) is None
    assert here.provider_for(here.route(loaded(row, FALLBACK))) is SECOND


def test_a_mail_another_kind_of_primary_took_has_no_provider_here() -> None:
    """Consumers restarted with MAILBUS_PROVIDER=resend: a mail whose first claim went to a
    Postmark primary (``provider`` NULL, ``provider_kind`` postmark) is neither looked up
    nor sent at Resend, whether in doubt or a retry; its route names the recorded kind.
    One claimed before its kind was recorded (NULL) is the configured primary's."""
    here = routing(BreakerState.CLOSED, "resend")
    for row in (
        replace(ALERT, attempts=1, first_tried_at=NOW, in_doubt_since=NOW),
        replace(ALERT, attempts=1, first_tried_at=NOW),
        replace(ALERT, attempts=0, first_tried_at=NOW),
    ):
        assert here.route(loaded(row, None, "postmark")) == "postmark"
        assert here.taken_by(loaded(row, None, "postmark")) == "postmark"
        assert here.provider_for(here.route(loaded(row, None, "postmark"))) is None
        assert here.provider_for(here.route(loaded(row, None, "resend"))) is PRIMARY
        assert here.provider_for(here.route(loaded(row, None, None))) is PRIMARY


def test_a_fallbacks_mail_is_judged_by_the_fallbacks_kind() -> None:
    """The kind a claim records is its route's provider's here: the fallback's for the
    fallback's route, so a mail a Postmark fallback took stays there under a SendGrid
    primary; a mail never tried goes where it is routed, whatever it records."""
    here = routing(BreakerState.CLOSED)
    row = replace(ALERT, attempts=1, first_tried_at=NOW)
    assert (here.kind_for(None), here.kind_for("fallback:postmark")) == ("sendgrid", "postmark")
    assert here.provider_for(here.route(loaded(row, "fallback:postmark", "postmark"))) is SECOND
    assert here.route(loaded(ALERT, None, "postmark")) is None


SES = {
    "MAILBUS_MAIL_FROM": "shop@example.com",
    "MAILBUS_SES_REGION": "eu-west-1",
    "MAILBUS_SES_ENDPOINT_URL": "http://127.0.0.1:1",
}


@pytest.mark.parametrize(
    ("env", "key_window_s", "look_up"),
    [
        ({"MAILBUS_FALLBACK_PROVIDER_URL": "http://fallback.test"}, None, True),  # http dialect
        ({"MAILBUS_FALLBACK_PROVIDER": "resend"}, 86_400.0, False),
        ({"MAILBUS_FALLBACK_PROVIDER": "postmark"}, "none", True),
        ({"MAILBUS_FALLBACK_PROVIDER": "sendgrid"}, "none", False),
        (
            {"MAILBUS_FALLBACK_PROVIDER": "mailgun", "MAILBUS_MAILGUN_DOMAIN": "mg.example.com"},
            "none",
            False,
        ),
        ({"MAILBUS_FALLBACK_PROVIDER": "ses", **SES}, "none", False),
        (
            {
                "MAILBUS_FALLBACK_PROVIDER": "smtp",
                "MAILBUS_SMTP_URL": "smtp://127.0.0.1:2525",
                "MAILBUS_SMTP_FROM": "shop@example.com",
            },
            "none",
            False,
        ),
    ],
)
def test_the_fallback_is_sent_under_its_own_capability(
    env: dict[str, str], key_window_s: float | str | None, look_up: bool
) -> None:
    settings = load_settings({"MAILBUS_MAIL_FROM": "shop@example.com", **env})
    fallback = _fallback_provider(settings, senders())
    assert fallback is not None
    capability = fallback.capability
    window = "none" if capability.key is None else capability.key.window_s
    assert (window, capability.look_up) == (key_window_s, look_up)
    asyncio.run(fallback.aclose())


def test_a_named_fallback_talks_to_its_own_api_unless_told_otherwise() -> None:
    settings = load_settings(
        {"MAILBUS_FALLBACK_PROVIDER": "postmark", "MAILBUS_MAIL_FROM": "shop@example.com"}
    )
    assert settings.fallback_provider_url == "https://api.postmarkapp.com"
    assert load_settings({}).fallback_provider is None  # no fallback unless one is named


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"MAILBUS_FALLBACK_PROVIDER": "pigeon"}, "MAILBUS_FALLBACK_PROVIDER"),
        ({"MAILBUS_FALLBACK_PROVIDER": "http"}, "MAILBUS_FALLBACK_PROVIDER_URL"),
        ({"MAILBUS_FALLBACK_PROVIDER": "resend"}, "MAILBUS_MAIL_FROM"),
        ({"MAILBUS_FALLBACK_PROVIDER": "mailgun", "MAILBUS_MAIL_FROM": "a@b.c"}, "DOMAIN"),
        ({"MAILBUS_FALLBACK_PROVIDER": "smtp"}, "MAILBUS_SMTP_URL"),
        (  # one SES account (or SMTP server) cannot be its own fallback
            {"MAILBUS_PROVIDER": "ses", "MAILBUS_FALLBACK_PROVIDER": "ses", **SES},
            "MAILBUS_FALLBACK_PROVIDER",
        ),
    ],
)
def test_a_fallback_that_cannot_work_is_refused_at_start(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(env)
    assert setting in str(error.value)


BUILT_AS: dict[str, Callable[[Settings], Provider | None]] = {
    "MAILBUS_PROVIDER": lambda settings: _process_provider(settings, ["p1"], senders())[1],
    "MAILBUS_FALLBACK_PROVIDER": lambda settings: _fallback_provider(settings, senders()),
}


@pytest.mark.parametrize("role", list(BUILT_AS))
def test_a_key_window_longer_than_the_providers_own_is_refused(role: str) -> None:
    """Resend keeps a key 24 h: a MAILBUS_IDEMPOTENCY_WINDOW of two days would resend a
    mail in doubt on day two under a key Resend forgot, a second mail. The setting may
    only shorten a window (a test's); a longer one exits 2 naming it."""
    env = {role: "resend", "MAILBUS_MAIL_FROM": "shop@example.com"}
    with pytest.raises(ConfigError) as error:
        BUILT_AS[role](load_settings({**env, "MAILBUS_IDEMPOTENCY_WINDOW": "172800"}))
    assert "MAILBUS_IDEMPOTENCY_WINDOW" in str(error.value)
    sender = BUILT_AS[role](load_settings({**env, "MAILBUS_IDEMPOTENCY_WINDOW": "60"}))
    assert sender is not None and sender.capability.key is not None
    assert sender.capability.key.window_s == 60.0  # a test's short window stands
    asyncio.run(sender.aclose())
