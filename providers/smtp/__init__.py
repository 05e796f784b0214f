"""An SMTP server (docs/providers.md): neither key nor look-up; no webhooks (bounces come
back in the SMTP replies)."""

from mailbus.kernel.settings import Settings
from mailbus.providers.room import NamedProvider
from mailbus.providers.smtp.sending import SmtpProvider


def _sender(settings: Settings) -> SmtpProvider:
    return SmtpProvider(
        settings.smtp_url,
        settings.smtp_from,
        password=settings.smtp_password,
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        max_connections=settings.max_in_flight,
        allow_plaintext_auth=settings.smtp_allow_plaintext_auth,
    )


PROVIDER = NamedProvider(
    name="smtp",
    capability=SmtpProvider.capability,
    sender=_sender,
    conformance="tests/integration/test_smtp_provider.py",  # against a local SMTP server
    address=lambda settings: settings.smtp_url,
)
