"""What SES guarantees (docs/providers.md), apart from its sender so that choosing a
provider needs no AWS SDK: neither an idempotency key nor a look-up by anything mailbus
chooses."""

from mailbus.consumer.core.capability import Capability

__all__ = ["CAPABILITY"]

CAPABILITY = Capability(source="https://docs.aws.amazon.com/ses/latest/APIReference-V2/")
