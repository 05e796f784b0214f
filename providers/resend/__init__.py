"""Resend (docs/providers.md): an idempotency key kept 24 h; Svix-signed events."""

from mailbus.providers.resend import webhook
from mailbus.providers.resend.sending import RESEND_WINDOW_S, ResendDialect
from mailbus.providers.room import NamedProvider

PROVIDER = NamedProvider(
    name="resend",
    capability=ResendDialect("").capability,
    dialect=lambda settings: ResendDialect(
        settings.mail_from, settings.idempotency_window or RESEND_WINDOW_S
    ),
    receiver=webhook.receiver,
)
