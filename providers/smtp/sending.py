"""The SMTP provider adapter: one mail per SMTP transaction over aiosmtplib, as values.

:meth:`SmtpProvider.send` returns an :class:`~mailbus.consumer.core.smtp_outcome.SmtpReply` (any
reply code, classified by :func:`~mailbus.consumer.core.smtp_outcome.classify_smtp`) or a
:class:`~mailbus.consumer.core.outcome.TransportFailure`; it never raises for a network problem:

=========================================================  ====================================
what happened                                              result
=========================================================  ====================================
a refusing greeting, EHLO or STARTTLS reply (421 ...)      ``SmtpReply(code, text, "connect")``
AUTH refused (535: a rotated password)                     ``SmtpReply(code, text, "auth")``
a reply to MAIL, RCPT or DATA other than success           ``SmtpReply(code, text, stage)``
250 after the message's final dot                          ``SmtpReply(250, text, "end")``
refused, reset, TLS failure, timed out before DATA         ``SmtpDown(stage, detail)``
lost or timed out once DATA was sent, before its reply     ``TransportFailure(sent=True)``
=========================================================  ====================================

The stages before RCPT are about the server, not the mail (see
:mod:`mailbus.consumer.core.smtp_outcome`): they feed the breaker and spend no attempt.

SMTP has neither an idempotency key nor a look-up (:attr:`SmtpProvider.capability`), so an
unknown outcome (the connection lost after DATA) stays ``unknown`` -- never resent (at
most once) -- until an operator resolves it; with MAILBUS_UNKNOWN_OUTCOME=at_least_once
the mail is sent again at its next retry (a duplicate possible). Each mail
carries a deterministic ``Message-ID: <sha256(key)[:32]@domain>`` of its provider key
(docs/providers.md#the-key-the-provider-sees), so a receiver can spot a duplicate, and a
key enqueued again after retention is a new Message-ID.
Connections are kept and reused (at most ``max_connections``); a kept connection that
fails before DATA (or answers MAIL with, say, ``421`` as it closes) is replaced once,
without counting as a call. ``smtp://user@host`` would send the password in the clear: it
is refused unless ``allow_plaintext_auth`` (MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote, urlsplit

import aiosmtplib

from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.outcome import TransportFailure, clip_reason
from mailbus.consumer.core.smtp_outcome import SERVER_STAGES, AnyCallResult, SmtpDown, SmtpReply
from mailbus.consumer.provider import LookupResult, OutgoingMail
from mailbus.consumer.templates import Rendered
from mailbus.kernel.errors import ConfigError, InvalidSendError
from mailbus_client.send_request import mail_headers

__all__ = [
    "SmtpPrepared",
    "SmtpProvider",
    "SmtpTarget",
    "mail_parts",
    "message_id_for",
    "render_mail",
    "template_data",
]

NO_LOOKUP = "SMTP has no look-up"
_SCHEMES = {  # port, STARTTLS, implicit TLS
    "smtp": (25, False, False),
    "smtp+starttls": (587, True, False),
    "smtps": (465, False, True),
}


@dataclass(frozen=True)
class SmtpTarget:
    """Where and how to connect: ``MAILBUS_SMTP_URL`` parsed."""

    host: str
    port: int
    start_tls: bool
    use_tls: bool
    username: str | None

    @classmethod
    def parse(cls, url: str, allow_plaintext_auth: bool = False) -> SmtpTarget:
        """Raises :class:`ConfigError` for a URL that is malformed, or that would send the
        AUTH password without TLS (``smtp://user@host``) unless ``allow_plaintext_auth``."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError:
            raise ConfigError("MAILBUS_SMTP_URL", "not a URL") from None
        scheme = _SCHEMES.get(parts.scheme.lower())
        if scheme is None or not parts.hostname:
            raise ConfigError(
                "MAILBUS_SMTP_URL", "expected smtp://, smtp+starttls:// or smtps:// with a host"
            )
        if parts.path not in ("", "/") or parts.query or parts.password:
            raise ConfigError(
                "MAILBUS_SMTP_URL", "no path, query or password (use MAILBUS_SMTP_PASSWORD)"
            )
        default_port, start_tls, use_tls = scheme
        username = unquote(parts.username) if parts.username else None
        if username and not (start_tls or use_tls) and not allow_plaintext_auth:
            raise ConfigError(
                "MAILBUS_SMTP_URL",
                "smtp://user@host sends the password without TLS: use smtp+starttls:// or"
                " smtps://, or set MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH=true",
            )
        return cls(parts.hostname, port or default_port, start_tls, use_tls, username)


@dataclass(frozen=True)
class SmtpPrepared:
    """A mail encoded into its SMTP transaction."""

    key: str
    recipient: str
    message: bytes
    message_id: str


def message_id_for(key: str, domain: str) -> str:
    """``<sha256(key)[:32]@domain>`` of the row's provider key: the same key, the same
    Message-ID; a key enqueued again after retention, a new one."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"<{digest}@{domain}>"


def render_mail(template: str, variables: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(subject, text, html): the ``subject``/``text``/``html`` variables if present, else a
    plain rendering of the template name and its variables."""
    subject = variables.get("subject")
    text = variables.get("text")
    html = variables.get("html")
    if not isinstance(subject, str):
        subject = template
    if not isinstance(text, str):
        lines = [f"{key}: {value}" for key, value in sorted(variables.items()) if key != "html"]
        text = "\n".join([template, "", *lines]) + "\n"
    return subject, text, html if isinstance(html, str) else None


def mail_parts(mail: OutgoingMail) -> tuple[str, str, str | None]:
    """(subject, text, html) of ``mail``: its local template's rendering if it has one,
    else :func:`render_mail`; a mail to be sent by a provider's own template cannot be
    spelled out here (:class:`InvalidSendError`)."""
    if isinstance(mail.content, Rendered):
        return mail.content.subject, mail.content.text, mail.content.html
    if mail.content is not None:
        raise InvalidSendError("template", "this provider keeps no templates of its own")
    return render_mail(mail.template, mail.variables)


def template_data(mail: OutgoingMail) -> dict[str, Any]:
    """The variables a provider's own template is filled with: the mail's, but its
    ``headers`` (sent as the mail's headers)."""
    return {key: value for key, value in mail.variables.items() if key != "headers"}


_OWN_HEADERS = frozenset({"from", "to", "subject", "message-id", "date"})


class SmtpProvider:
    """Sends through the SMTP server of ``url`` as ``sender``."""

    capability = Capability(source="RFC 5321: no idempotency key, no look-up")

    def __init__(
        self,
        url: str,
        sender: str,
        *,
        password: str = "",
        connect_timeout: float = 2.0,
        request_timeout: float = 15.0,
        max_connections: int = 32,
        message_id_domain: str | None = None,
        allow_plaintext_auth: bool = False,
    ) -> None:
        self._target = SmtpTarget.parse(url, allow_plaintext_auth)
        if "@" not in sender or any(ch in sender for ch in "\r\n<> "):
            raise ConfigError("MAILBUS_SMTP_FROM", "must be a plain address like a@b.example")
        if not (connect_timeout > 0 and request_timeout > 0):
            raise ConfigError("MAILBUS_REQUEST_TIMEOUT", "must be > 0")
        self._sender = sender
        self._password = password
        self._domain = message_id_domain or sender.rsplit("@", 1)[1]
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._idle: list[aiosmtplib.SMTP] = []
        self._permits = asyncio.Semaphore(max_connections)

    def prepare(self, mail: OutgoingMail) -> SmtpPrepared:
        """Build the message with the stdlib email package; a header value with CR or LF
        (or anything else the message cannot carry) raises :class:`InvalidSendError`."""
        subject, text, html = mail_parts(mail)
        for field, value in (("to_address", mail.to_address), ("subject", subject)):
            if "\r" in value or "\n" in value:
                raise InvalidSendError(field, "must not contain CR or LF (header injection)")
        message_id = message_id_for(mail.key, self._domain)
        headers = mail.variables.get("headers")
        extra = {} if headers is None else mail_headers(headers)  # e.g. List-Unsubscribe
        if own := sorted(_OWN_HEADERS.intersection(name.lower() for name in extra)):
            raise InvalidSendError("payload_json", f"header {own[0]} is set by mailbus")
        msg = EmailMessage()
        try:
            msg["From"] = self._sender
            msg["To"] = mail.to_address
            msg["Subject"] = subject
            msg["Message-ID"] = message_id
            msg["Date"] = formatdate(usegmt=True)
            for name, value in extra.items():
                msg[name] = value
            msg.set_content(text)
            if html is not None:
                msg.add_alternative(html, subtype="html")
            data = msg.as_bytes()
        except (ValueError, TypeError, UnicodeError) as exc:
            raise InvalidSendError("payload_json", f"not a mail SMTP can carry: {exc}") from None
        return SmtpPrepared(mail.key, mail.to_address, data, message_id)

    async def send(self, mail: SmtpPrepared) -> AnyCallResult:
        """One SMTP transaction; a reply or a transport failure, never raises for network
        or SMTP problems."""
        async with self._permits:
            for reused in (True, False):
                smtp = self._idle.pop() if reused and self._idle else None
                fresh = smtp is None
                stage = "connect"
                try:
                    async with asyncio.timeout(self._request_timeout):
                        if smtp is None:
                            smtp = await self._connect()
                            stage = "auth"
                            await self._log_in(smtp)
                        stage = "mail"
                        await smtp.mail(self._sender)
                        stage = "rcpt"
                        await smtp.rcpt(mail.recipient)
                        stage = "data"
                        reply = await smtp.data(mail.message)
                except aiosmtplib.SMTPResponseException as exc:
                    self._discard(smtp)  # its envelope is half-done: never reused
                    if stage in SERVER_STAGES and not fresh:
                        continue  # a kept connection the server is closing (421 to MAIL)
                    return SmtpReply(exc.code, exc.message, stage, mail.message_id)
                except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
                    self._discard(smtp)
                    if stage == "data":
                        return TransportFailure(True, _describe(exc))
                    if not fresh:
                        continue  # a kept connection the server closed meanwhile
                    return SmtpDown(stage, _describe(exc))
                self._release(smtp)
                return SmtpReply(reply.code, reply.message, "end", mail.message_id)
        return TransportFailure(False, "no connection")  # pragma: no cover - loop returns

    async def lookup(self, dedupe_key: str) -> LookupResult:
        """SMTP cannot tell whether it accepted a mail: the look-up always fails (the
        service does not call it: :attr:`capability` has no look-up)."""
        return LookupResult(None, True, NO_LOOKUP)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for smtp in idle:
            try:
                await asyncio.wait_for(smtp.quit(), self._connect_timeout)
            except (TimeoutError, aiosmtplib.SMTPException, OSError):
                smtp.close()

    async def _connect(self) -> aiosmtplib.SMTP:
        target = self._target
        smtp = aiosmtplib.SMTP(
            hostname=target.host,
            port=target.port,
            use_tls=target.use_tls,
            start_tls=target.start_tls,
            timeout=self._request_timeout,
        )
        try:
            await smtp.connect(timeout=self._connect_timeout)
        except BaseException:
            smtp.close()
            raise
        return smtp

    async def _log_in(self, smtp: aiosmtplib.SMTP) -> None:
        """AUTH, when the URL names a user: its own stage, so a refused password is told
        apart from a refusing greeting."""
        if self._target.username:
            await smtp.login(self._target.username, self._password)

    def _release(self, smtp: aiosmtplib.SMTP) -> None:
        """Keep a connection after a completed transaction."""
        if smtp.is_connected:
            self._idle.append(smtp)

    def _discard(self, smtp: aiosmtplib.SMTP | None) -> None:
        if smtp is not None:
            smtp.close()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return clip_reason(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
