"""SendGrid (docs/providers.md): neither key nor look-up, at most once; signed event
batches."""

from mailbus.providers.room import NamedProvider
from mailbus.providers.sendgrid import webhook
from mailbus.providers.sendgrid.sending import SendGridDialect

PROVIDER = NamedProvider(
    name="sendgrid",
    capability=SendGridDialect.capability,
    dialect=lambda settings: SendGridDialect(settings.mail_from),
    receiver=webhook.receiver,
)
