"""Amazon SES v2 through the AWS SDK (docs/providers.md): neither key nor look-up; events
through SNS."""

from mailbus.consumer.adapter import Provider
from mailbus.kernel.settings import Settings
from mailbus.providers.room import NamedProvider
from mailbus.providers.ses import webhook
from mailbus.providers.ses.capability import CAPABILITY


def _sender(settings: Settings) -> Provider:
    from mailbus.providers.ses.sending import SesProvider  # boto3: the [ses] extra

    return SesProvider(
        settings.mail_from,
        region=settings.ses_region,
        endpoint_url=settings.ses_endpoint_url,
        access_key_id=settings.ses_access_key_id,
        secret_access_key=settings.ses_secret_access_key,
        configuration_set=settings.ses_configuration_set,
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        max_connections=settings.max_in_flight,
    )


PROVIDER = NamedProvider(
    name="ses",
    capability=CAPABILITY,
    sender=_sender,
    conformance="tests/integration/test_ses_provider.py",  # against moto's SES
    receiver=webhook.receiver,
    address=lambda settings: settings.ses_endpoint_url or f"ses:{settings.ses_region or 'default'}",
)
