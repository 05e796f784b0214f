"""Amazon SES (API v2) through the AWS SDK: boto3's ``sesv2`` client, in worker threads of
its own (one per in-flight call), off the event loop.

``SendEmail`` (``POST /v2/email/outbound-emails``) answers ``{"MessageId"}``
(https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_SendEmail.html); that id is
what SES puts in ``mail.messageId`` of its SNS events (:mod:`mailbus.feedback.native.sns`),
so it is the id stored.

SES has neither an idempotency key nor a look-up of a sent mail by something mailbus
chose: its capability is *neither* (:mod:`mailbus.consumer.core.capability`). A call whose
outcome is unknown stays ``unknown`` for an operator (at most once, the default), or is
resent with ``MAILBUS_UNKNOWN_OUTCOME=at_least_once``. For the same reason the SDK's own
retries are off (``total_max_attempts=1``): botocore would otherwise resend a timed-out
call by itself, and a second call can be a second mail. The row's provider key
(docs/providers.md#the-key-the-provider-sees) travels as an ``EmailTags`` entry
(:func:`key_tag`), so SES's events carry it.

Errors of SendEmail (its "Errors" section, the SDK's service model):

==============================================  ==============  =========================
error code                                      result          outcome
==============================================  ==============  =========================
TooManyRequestsException (429), Throttling,     reply 429       retry, with backoff
ThrottlingException
MessageRejected, MailFromDomainNotVerified-     reply 400/404   rejected: failed + DLQ
Exception, BadRequestException,
NotFoundException, LimitExceededException
AccountSuspendedException,                      reply, account  the provider's state:
SendingPausedException, a refused credential                    retried, the breaker
(403, UnrecognizedClientException, ...)                         counts it, no attempt
any 5xx                                         lost reply      unknown: with no key or
                                                                look-up a 5xx is not a
                                                                definite "not accepted"
connect refused / connect timeout               not sent        retry
read timeout, connection closed after sending   lost reply      unknown
==============================================  ==============  =========================
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
)

from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.outcome import CallResult, ProviderReply, TransportFailure, clip_reason
from mailbus.consumer.provider import LookupResult, OutgoingMail, json_body, valid_id
from mailbus.consumer.providers.smtp import mail_parts, template_data
from mailbus.consumer.templates import ProviderTemplate
from mailbus.kernel.errors import ConfigError, InvalidSendError
from mailbus_client.send_request import mail_headers

__all__ = ["KEY_TAG", "SesPrepared", "SesProvider", "key_tag", "ses_error_result"]

NO_LOOKUP = "SES has no look-up by anything mailbus chooses"
KEY_TAG = "mailbus_key"  # the EmailTags entry carrying the provider key (key_tag)
_TAG_VALUE = re.compile(r"[A-Za-z0-9_-]+")
_MAX_TAG_CHARS = 256
_THROTTLED = frozenset({"TooManyRequestsException", "Throttling", "ThrottlingException"})
_ACCOUNT = frozenset(
    {
        "AccountSuspendedException",
        "SendingPausedException",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "AccessDeniedException",
        "ExpiredTokenException",
    }
)


@dataclass(frozen=True)
class SesPrepared:
    """A mail encoded into SendEmail's arguments."""

    key: str
    arguments: Mapping[str, Any]


def key_tag(key: str) -> dict[str, str]:
    """The ``EmailTags`` entry carrying the provider key, which SES puts in the ``tags`` of
    its events. A tag value may hold only ASCII letters, digits, ``_`` and ``-``, at most
    256 of them (https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_MessageTag.html),
    so the tag's name says the form: ``mailbus_key`` (the key as it is),
    ``mailbus_key_b32`` (its UTF-8 in lower-case base32 without padding) or
    ``mailbus_key_sha256`` (the hex SHA-256 of its UTF-8, for a key of more than 160 bytes)."""
    if len(key) <= _MAX_TAG_CHARS and _TAG_VALUE.fullmatch(key):
        return {"Name": KEY_TAG, "Value": key}
    raw = key.encode("utf-8", "surrogatepass")
    encoded = base64.b32encode(raw).decode().rstrip("=").lower()
    if len(encoded) <= _MAX_TAG_CHARS:
        return {"Name": f"{KEY_TAG}_b32", "Value": encoded}
    return {"Name": f"{KEY_TAG}_sha256", "Value": hashlib.sha256(raw).hexdigest()}


def ses_error_result(status: int, code: str, message: str) -> CallResult:
    """What one SES error reply means, per the table above (pure)."""
    excerpt = f"{code}: {message}" if message else code
    if 500 <= status <= 599:
        return TransportFailure(True, clip_reason(f"http {status} {excerpt}"))
    if code in _THROTTLED:
        return ProviderReply(429, None, None, excerpt)
    if code in _ACCOUNT or status in (401, 403):
        return ProviderReply(status, None, None, excerpt, server_stage="account")
    return ProviderReply(status if 400 <= status <= 499 else 400, None, None, excerpt)


class SesProvider:
    """Sends through SES v2 in ``region`` as ``sender``; credentials from the access key
    pair if given, else the SDK's default chain; ``endpoint_url`` for tests (moto)."""

    capability = Capability(source="https://docs.aws.amazon.com/ses/latest/APIReference-V2/")

    def __init__(
        self,
        sender: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        access_key_id: str = "",
        secret_access_key: str = "",
        configuration_set: str | None = None,
        connect_timeout: float = 2.0,
        request_timeout: float = 15.0,
        max_connections: int = 32,
    ) -> None:
        if bool(access_key_id) != bool(secret_access_key):
            raise ConfigError(
                "MAILBUS_SES_SECRET_ACCESS_KEY" if access_key_id else "MAILBUS_SES_ACCESS_KEY_ID",
                "the access key id and its secret go together",
            )
        credentials = (
            {"aws_access_key_id": access_key_id, "aws_secret_access_key": secret_access_key}
            if access_key_id
            else {}
        )
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=request_timeout,
            retries={"total_max_attempts": 1},  # a retry of a sent call can be a second mail
            max_pool_connections=max_connections,
        )
        self._client = boto3.session.Session().client(
            "sesv2", region_name=region, endpoint_url=endpoint_url, config=config, **credentials
        )
        if self._client.meta.region_name is None:
            raise ConfigError("MAILBUS_SES_REGION", "required (or AWS_REGION for the SDK)")
        self._sender = sender
        self._configuration_set = configuration_set
        self._deadline = connect_timeout + request_timeout + 1.0
        self._permits = asyncio.Semaphore(max_connections)
        # its own threads: asyncio.to_thread's default pool has min(32, CPUs + 4) workers,
        # 6 on two cores, which would cap MAILBUS_MAX_IN_FLIGHT without saying so
        self._threads = ThreadPoolExecutor(max_connections, thread_name_prefix="mailbus-ses")

    def prepare(self, mail: OutgoingMail) -> SesPrepared:
        """SendEmail's arguments: ``Content.Simple`` spelled out, or ``Content.Template``
        (``TemplateName`` and the variables as the JSON ``TemplateData``) for a mail sent by
        an SES template."""
        if isinstance(mail.content, ProviderTemplate):
            form = "Template"
            content: dict[str, Any] = {
                "TemplateName": mail.content.template_id,
                "TemplateData": json_body(template_data(mail)).decode(),
            }
        else:
            form = "Simple"
            subject, text, html = mail_parts(mail)
            body: dict[str, Any] = {"Text": {"Data": text, "Charset": "UTF-8"}}
            if html is not None:
                body["Html"] = {"Data": html, "Charset": "UTF-8"}
            content = {"Subject": {"Data": subject, "Charset": "UTF-8"}, "Body": body}
        headers = mail.variables.get("headers")
        if headers is not None:  # Simple and Template both carry Headers
            content["Headers"] = [
                {"Name": name, "Value": value} for name, value in mail_headers(headers).items()
            ]
        if not mail.to_address or "@" not in mail.to_address:
            raise InvalidSendError("to_address", "must be an email address")
        arguments: dict[str, Any] = {
            "FromEmailAddress": self._sender,
            "Destination": {"ToAddresses": [mail.to_address]},
            "Content": {form: content},
        }
        if self._configuration_set:
            arguments["ConfigurationSetName"] = self._configuration_set
        arguments["EmailTags"] = [key_tag(mail.key)]
        return SesPrepared(mail.key, arguments)

    async def send(self, mail: OutgoingMail | SesPrepared) -> CallResult:
        """One SendEmail call in a worker thread; a result value, never raises for a
        network or API problem."""
        prepared = mail if isinstance(mail, SesPrepared) else self.prepare(mail)
        async with self._permits:
            try:
                async with asyncio.timeout(self._deadline):
                    call = functools.partial(self._client.send_email, **prepared.arguments)
                    reply = await asyncio.get_running_loop().run_in_executor(self._threads, call)
            except TimeoutError:
                return TransportFailure(True, f"no reply within {self._deadline:g}s")
            except ClientError as exc:
                error = exc.response.get("Error", {})
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400))
                return ses_error_result(
                    status, str(error.get("Code", "")), str(error.get("Message", ""))
                )
            except (EndpointConnectionError, ConnectTimeoutError, NoCredentialsError) as exc:
                return TransportFailure(False, clip_reason(f"{type(exc).__name__}: {exc}"))
            except BotoCoreError as exc:  # read timeout, connection closed: maybe sent
                return TransportFailure(True, clip_reason(f"{type(exc).__name__}: {exc}"))
        status = int(reply.get("ResponseMetadata", {}).get("HTTPStatusCode", 200))
        return ProviderReply(status, valid_id(reply.get("MessageId")))

    async def lookup(self, dedupe_key: str) -> LookupResult:
        return LookupResult(None, True, NO_LOOKUP)

    async def aclose(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()
