"""Structured logs: one JSON object per line on stderr, with secrets and addresses masked.

Fields passed with ``extra=`` (``log.info("sent", extra={"send_id": 7})``) become keys of
the line beside ``ts``, ``level``, ``logger`` and ``msg`` (a name already taken gets a
trailing ``_``); values that are not JSON types are written as their ``str()``.

:class:`RedactingFilter`, installed on the handler by :func:`configure_logging`, rewrites
every record before it is formatted: the rendered message, the exception text, the
stack text and every ``extra=`` field (strings inside lists and dicts too; the whole value
of a field named like a secret: ``password``, ``api_key``, ``token``, ``authorization``...).
Email addresses keep their first character and domain (``ana.smith@example.com`` →
``a***@example.com``); bearer tokens, ``api_key=…``-style values, ``Authorization`` header
values, passwords in URLs and the exact values of the
secret settings (:data:`SECRET_ENV`: the provider keys, the webhook secrets and keys, the SES
and SMTP credentials, the Kafka passwords and client secret, their ``_FILE`` variants, and
anything passed to :func:`register_secret`) become ``***``.

A line written inside a mail's span (:func:`mailbus.kernel.tracing.current`: the consumer's
delivery, the intake's event, a webhook's event) carries ``trace_id`` and ``span_id``, the
mail's trace in the tracing backend (docs/guides/tracing.md).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path

from mailbus.kernel import tracing

__all__ = [
    "SECRET_ENV",
    "JsonFormatter",
    "RedactingFilter",
    "configure_logging",
    "extra_fields",
    "redact",
    "register_secret",
    "registered_secrets",
]

MASK = "***"
_MIN_SECRET_LEN = 8
# Every secret setting (tests/unit/test_secret_settings.py holds it to settings.py's).
SECRET_ENV = (
    "MAILBUS_PROVIDER_API_KEY",
    "MAILBUS_FALLBACK_PROVIDER_API_KEY",
    "MAILBUS_PROVIDER_P0_API_KEY",
    "MAILBUS_PROVIDER_P1_API_KEY",
    "MAILBUS_PROVIDER_P2_API_KEY",
    "MAILBUS_WEBHOOK_SECRET",
    "MAILBUS_UNSUBSCRIBE_SECRET",
    "MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS",
    "MAILBUS_SCHEMA_REGISTRY_AUTH",
    "MAILBUS_SENDGRID_WEBHOOK_KEY",
    "MAILBUS_MAILGUN_WEBHOOK_KEY",
    "MAILBUS_POSTMARK_WEBHOOK_AUTH",
    "MAILBUS_RESEND_WEBHOOK_SECRET",
    "MAILBUS_SES_ACCESS_KEY_ID",
    "MAILBUS_SES_SECRET_ACCESS_KEY",
    "MAILBUS_SMTP_PASSWORD",
    "MAILBUS_KAFKA_SASL_PASSWORD",
    "MAILBUS_KAFKA_SSL_KEY_PASSWORD",
    "MAILBUS_KAFKA_OAUTH_CLIENT_SECRET",
    "MAILBUS_CONSOLE_PROXY_SECRET",
)

# Bounded repetitions keep every scan linear on long lines.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]{1,256}:)[^/\s@]{1,256}@", re.I
)
# The value after an Authorization header name, keeping its scheme word (Basic, Bearer...).
_AUTH_HEADER = re.compile(
    r"""(?P<head>\bauthorization["']?\s*[:=]\s*["']?(?:[A-Za-z]+\s+)?+)(?![*]{3})[^\s"',;)}\]]+""",
    re.I,
)
_BEARER = re.compile(r"(?P<head>\bBearer\s+)[A-Za-z0-9._~+/=-]+", re.I)
_KEY_VALUE = re.compile(
    r"""(?P<head>\b(?:[a-z0-9]+[_-])?(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|"""
    # "key: v", '"key": "v"' or "key=v"; not "key = v", which is code in a traceback.
    r"""token|secret|password|passwd)(?:["']?\s*:\s*|=)["']?)(?![*]{3})[^\s"'&,;)}\]]+""",
    re.I,
)
_EMAIL = re.compile(
    r"(?P<first>[\w.%+-])[\w.%+-]{0,63}(?P<at>@|%40)(?P<domain>(?:[\w-]{1,63}\.){1,8}[A-Za-z]{2,24})\b"
)

_registered: set[str] = set()
_registered_lock = threading.Lock()
_file_cache: dict[str, tuple[float, str]] = {}


def register_secret(value: str | None) -> None:
    """Mask this exact value in every log line from now on (ignored below 8 characters)."""
    if value and len(value.strip()) >= _MIN_SECRET_LEN:
        with _registered_lock:
            _registered.add(value.strip())


def registered_secrets() -> frozenset[str]:
    """What :func:`register_secret` was given (for a child process's logs)."""
    with _registered_lock:
        return frozenset(_registered)


def _secret_values() -> list[str]:
    values = set(_registered)
    for name in SECRET_ENV:
        direct = os.environ.get(name, "").strip()
        if direct:
            values.add(direct)
        path = os.environ.get(f"{name}_FILE", "").strip()
        if path:
            from_file = _read_secret_file(path)
            if from_file:
                values.add(from_file)
    # Longest first, so a secret containing another is masked whole.
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def _read_secret_file(path: str) -> str:
    try:
        mtime = Path(path).stat().st_mtime
        cached = _file_cache.get(path)
        if cached is None or cached[0] != mtime:
            cached = (mtime, Path(path).read_text().strip())
            _file_cache[path] = cached
        return cached[1]
    except (OSError, UnicodeDecodeError):  # the setting's own error says so
        return ""


def redact(text: str) -> str:
    """``text`` with secrets replaced by ``***`` and email addresses masked."""
    for secret in _secret_values():
        text = text.replace(secret, MASK)
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\g<head>{MASK}@", text)
    text = _AUTH_HEADER.sub(rf"\g<head>{MASK}", text)
    text = _BEARER.sub(rf"\g<head>{MASK}", text)
    text = _KEY_VALUE.sub(rf"\g<head>{MASK}", text)
    if "@" in text or "%40" in text:
        text = _EMAIL.sub(rf"\g<first>{MASK}\g<at>\g<domain>", text)
    return text


# Attributes every LogRecord has; anything else on a record came with ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "_mailbus_redacted",
}
_SECRET_FIELD = re.compile(
    r"(?:api[_-]?key|apikey|token|secret|password|passwd|authorization|credentials?)$", re.I
)
_JSON_SCALARS = (bool, int, float, type(None))


def extra_fields(record: logging.LogRecord) -> dict[str, object]:
    """The fields ``record`` was given with ``extra=``."""
    return {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}


def _redact_value(value: object, depth: int = 0) -> object:
    """``value`` with every string redacted; JSON containers kept, anything else str()ed."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, _JSON_SCALARS):
        return value
    if depth < 5 and isinstance(value, dict):
        return {
            str(k): MASK if _SECRET_FIELD.search(str(k)) else _redact_value(v, depth + 1)
            for k, v in value.items()
        }
    if depth < 5 and isinstance(value, (list, tuple, set, frozenset)):
        return [_redact_value(v, depth + 1) for v in value]
    return redact(str(value))


class RedactingFilter(logging.Filter):
    """Renders each record's message once and stores the redacted text in its place."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # bad format arguments: keep what can be shown, redacted
            message = f"{record.msg!s} {record.args!r}"
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in extra_fields(record).items():
            setattr(record, key, MASK if _SECRET_FIELD.search(key) else _redact_value(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (the module's docstring says which keys)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        trace = tracing.current()
        if trace is not None:
            entry["trace_id"] = trace.trace_id
            entry["span_id"] = trace.parent_id
        if record.exc_info or record.exc_text:
            entry["exc"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        if record.stack_info:
            entry["stack"] = record.stack_info
        for key, value in extra_fields(record).items():
            while key in entry:
                key += "_"
            entry[key] = value
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per HTTP request is noise at INFO; our own logs say what matters.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))
