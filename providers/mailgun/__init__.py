"""Mailgun (docs/providers.md): neither key nor look-up, at most once; events signed by
timestamp and token."""

from mailbus.providers.mailgun import webhook
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.room import NamedProvider

PROVIDER = NamedProvider(
    name="mailgun",
    capability=MailgunDialect.capability,
    dialect=lambda settings: MailgunDialect(settings.mail_from, settings.mailgun_domain),
    receiver=webhook.receiver,
)
