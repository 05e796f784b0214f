"""Amazon SES (API v2) through the AWS SDK: boto3's ``sesv2`` client, in worker threads of
its own (one per in-flight call), off the event loop.

``SendEmail`` (``POST /v2/email/outbound-emails``) answers ``{"MessageId"}``
(https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_SendEmail.html); that id is
what SES puts in ``mail.messageId`` of its SNS events (:mod:`mailbus.providers.ses.events`),
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
any error whose message is "Daily message       reply, quota    the provider's state; the
quota exceeded"                                                 next try waits
                                                                MAILBUS_QUOTA_PAUSE
TooManyRequestsException (429), Throttling,     reply 429       retry, with backoff
ThrottlingException ("Maximum sending rate
exceeded")
MessageRejected, BadRequestException,           reply 400/404   rejected: failed + DLQ
NotFoundException (a template),
LimitExceededException
AccountSuspendedException,                      reply, account  the provider's state:
SendingPausedException, a refused credential                    retried, the breaker
(401/403, UnrecognizedClientException, ...),                    counts it, no attempt
NotFoundException naming a configuration set
MailFromDomainNotVerifiedException,             reply, sender   the same
MessageRejected "Email address is not verified"
naming our From address
any 5xx                                         lost reply      unknown: with no key or
                                                                look-up a 5xx is not a
                                                                definite "not accepted"
connect refused / connect timeout, no or        not sent        retry
partial credentials, a credential or token
that could not be fetched, parameters the SDK
refused, a certificate refused in the TLS
handshake, a call still queued for a worker
thread at its deadline
read timeout, connection closed after sending,  lost reply      unknown
any other TLS error (urllib3 raises one while
reading the reply as the same ``SSLError``)
==============================================  ==============  =========================

The quota and rate messages are SES's own
(https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html: the API
"produces a ThrottlingException error" with "Daily message quota exceeded" or "Maximum
sending rate exceeded"); the daily quota is a rolling 24 h window
(https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas.html), so capacity comes
back as the sends of 24 h before age out. The SDK raises the not-sent errors above before
it writes a byte (botocore signs after resolving credentials and validating parameters).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import re
import ssl
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any

from mailbus.consumer.core.outcome import (
    ACCOUNT,
    QUOTA,
    SENDER,
    CallResult,
    ProviderReply,
    TransportFailure,
    clip_reason,
)
from mailbus.consumer.provider import LookupResult, OutgoingMail, json_body, valid_id
from mailbus.consumer.templates import ProviderTemplate
from mailbus.kernel.errors import ConfigError, InvalidSendError
from mailbus.kernel.extras import extra
from mailbus.providers.ses.capability import CAPABILITY
from mailbus.providers.smtp.sending import mail_parts, template_data
from mailbus_client.send_request import mail_headers

with extra("ses"):
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        CredentialRetrievalError,
        EndpointConnectionError,
        NoCredentialsError,
        ParamValidationError,
        PartialCredentialsError,
        ProxyConnectionError,
        SSLError,
        SSOError,
        TokenRetrievalError,
    )

__all__ = ["KEY_TAG", "SesPrepared", "SesProvider", "key_tag", "ses_error_result"]

NO_LOOKUP = "SES has no look-up by anything mailbus chooses"
KEY_TAG = "mailbus_key"  # the EmailTags entry carrying the provider key (key_tag)
_TAG_VALUE = re.compile(r"[A-Za-z0-9_-]+")
_MAX_TAG_CHARS = 256
_DAILY_QUOTA = re.compile(r"(?i)daily message quota exceeded")
_CONFIGURATION_SET = re.compile(r"(?i)configuration set")
# raised before any byte of the request is written: the mail was not sent
_NOT_SENT: tuple[type[Exception], ...] = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ProxyConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
    TokenRetrievalError,
    SSOError,
    ParamValidationError,
)
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


def ses_error_result(status: int, code: str, message: str, sender: str = "") -> CallResult:
    """What one SES error reply means, per the table above (pure); ``sender`` is the From
    address, whose being unverified is the sender identity's state, not the mail's."""
    excerpt = f"{code}: {message}" if message else code
    if 500 <= status <= 599:
        return TransportFailure(True, clip_reason(f"http {status} {excerpt}"))
    status = status if 400 <= status <= 499 else 400
    if _DAILY_QUOTA.search(message):
        return ProviderReply(status, None, None, excerpt, server_stage=QUOTA)
    if code in _THROTTLED:
        return ProviderReply(429, None, None, excerpt)
    if code == "MailFromDomainNotVerifiedException" or _unverified_sender(code, message, sender):
        return ProviderReply(status, None, None, excerpt, server_stage=SENDER)
    if (
        code in _ACCOUNT
        or status in (401, 403)
        or (code == "NotFoundException" and _CONFIGURATION_SET.search(message))
    ):
        return ProviderReply(status, None, None, excerpt, server_stage=ACCOUNT)
    return ProviderReply(status, None, None, excerpt)


def _unverified_sender(code: str, message: str, sender: str) -> bool:
    """A MessageRejected "Email address is not verified. The following identities failed
    the check ...: <addresses>" that names our From address (a recipient named alone is
    the mail's: an SES sandbox account sends only to verified recipients)."""
    address = parseaddr(sender)[1].lower()
    text = message.lower()
    return (
        code == "MessageRejected" and "not verified" in text and bool(address) and (address in text)
    )


def _certificate_refused(exc: SSLError) -> bool:
    """Whether a TLS error is a certificate refused, which only the handshake raises,
    before a byte of the request: botocore's SSLError wraps urllib3's, which wraps the
    ``ssl`` module's error."""
    error: Any = exc.kwargs.get("error")
    for _ in range(3):
        if isinstance(error, ssl.SSLCertVerificationError):
            return True
        if not isinstance(error, BaseException) or not error.args:
            return False
        error = error.args[0]
    return False


class _GivenUp(Exception):
    """A queued call whose caller had already given up: never started, never sent."""


class _Start:
    """Whether a call queued for a worker thread began (and so may have sent) or was given
    up first: exactly one of :meth:`begin` and :meth:`give_up` wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decided: str | None = None

    def begin(self) -> bool:
        return self._decide("begun")

    def give_up(self) -> bool:
        return self._decide("given up")

    def _decide(self, what: str) -> bool:
        with self._lock:
            if self._decided is None:
                self._decided = what
            return self._decided == what


class SesProvider:
    """Sends through SES v2 in ``region`` as ``sender``; credentials from the access key
    pair if given, else the SDK's default chain; ``endpoint_url`` for tests (moto)."""

    capability = CAPABILITY

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
            start = _Start()
            try:
                async with asyncio.timeout(self._deadline):
                    call = functools.partial(self._send_email, start, prepared.arguments)
                    reply = await asyncio.get_running_loop().run_in_executor(self._threads, call)
            except TimeoutError:
                if start.give_up():  # still queued behind a thread of an earlier call
                    return TransportFailure(False, f"not started within {self._deadline:g}s")
                return TransportFailure(True, f"no reply within {self._deadline:g}s")
            except ClientError as exc:
                error = exc.response.get("Error", {})
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400))
                return ses_error_result(
                    status, str(error.get("Code", "")), str(error.get("Message", "")), self._sender
                )
            except _NOT_SENT as exc:
                return TransportFailure(False, clip_reason(f"{type(exc).__name__}: {exc}"))
            except SSLError as exc:  # raised in the handshake or while reading the reply
                sent = not _certificate_refused(exc)
                return TransportFailure(sent, clip_reason(f"{type(exc).__name__}: {exc}"))
            except BotoCoreError as exc:  # read timeout, connection closed: maybe sent
                return TransportFailure(True, clip_reason(f"{type(exc).__name__}: {exc}"))
        status = int(reply.get("ResponseMetadata", {}).get("HTTPStatusCode", 200))
        return ProviderReply(status, valid_id(reply.get("MessageId")))

    def _send_email(self, start: _Start, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """SendEmail in a worker thread, unless the caller gave up while it was queued."""
        if not start.begin():
            raise _GivenUp()
        return self._client.send_email(**arguments)  # type: ignore[no-any-return]

    async def lookup(self, dedupe_key: str) -> LookupResult:
        return LookupResult(None, True, NO_LOOKUP)

    async def aclose(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()
