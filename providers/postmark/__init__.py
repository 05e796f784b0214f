"""Postmark (docs/providers.md): a look-up by metadata, no idempotency key; events behind
basic auth."""

from mailbus.providers.postmark import webhook
from mailbus.providers.postmark.sending import PostmarkDialect
from mailbus.providers.room import NamedProvider

PROVIDER = NamedProvider(
    name="postmark",
    capability=PostmarkDialect.capability,
    dialect=lambda settings: PostmarkDialect(settings.mail_from),
    receiver=webhook.receiver,
)
