"""Configuration from the environment (and an optional ``.env``-style file).

Every setting of docs/reference/contract.md#configuration is parsed and checked here, once,
at start-up; a bad value raises :class:`ConfigError` naming the variable, which the CLI turns
into exit status 2 and one line.
"""

from __future__ import annotations

import io
import ipaddress
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple, overload
from urllib.parse import urlsplit

from dotenv.parser import parse_stream

from mailbus.kernel.db_schema import DEFAULT_SCHEMA, parse_schema, with_search_path
from mailbus.kernel.durations import parse_duration, parse_rate, parse_schedule
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.kafka_security import KafkaSecurity, parse_kafka_security
from mailbus.kernel.provider_key import prefix_problem
from mailbus_client.policies import (
    DEFAULT_CAP_SHARES,
    load_policy_book,
    parse_cap_shares,
    parse_queue_cap,
)

__all__ = ["PriorityProvider", "Settings", "load_env_file", "load_settings"]

_DEFAULT_SANDBOX_URL = "http://127.0.0.1:8025"
_PLAINTEXT = KafkaSecurity()


class PriorityProvider(NamedTuple):
    """MAILBUS_PROVIDER_P0_URL (P1, P2), its API key and the file it was read from (read
    again when it changes, as every provider's key file is)."""

    priority: str
    url: str
    api_key: str
    api_key_file: str | None = None


@dataclass(frozen=True)
class Settings:
    # with its search_path set to db_schema, whatever it was given (__post_init__)
    database_url: str = "postgresql://localhost/mailbus"
    # MAILBUS_DATABASE_TRANSACTION_POOLING: the URL reaches PostgreSQL through a pooler that
    # hands out a server connection per transaction (mailbus/kernel/pooling.py)
    database_transaction_pooling: bool = False
    db_schema: str = DEFAULT_SCHEMA  # where mailbus's tables are (mailbus/kernel/db_schema.py)
    kafka_bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = "mailbus"
    provider_url: str = _DEFAULT_SANDBOX_URL
    provider_api_key: str = ""
    provider_api_key_file: str | None = None  # read again when it changes (a key rotation)
    # MAILBUS_FALLBACK_PROVIDER: any provider MAILBUS_PROVIDER may name; None: no fallback
    fallback_provider: str | None = None
    fallback_provider_url: str | None = None  # the named one's own API by default
    fallback_provider_api_key: str = ""
    fallback_provider_api_key_file: str | None = None
    # MAILBUS_PROVIDER_P0_URL / _API_KEY (and P1, P2): a priority's own HTTP provider
    priority_providers: tuple[PriorityProvider, ...] = ()
    max_in_flight: int = 32
    rate_limit: float | None = None
    fallback_rate_limit: float | None = None  # its own bucket: another provider's quota
    connect_timeout: float = 2.0
    request_timeout: float = 15.0
    max_attempts: int = 8
    backoff_base: float = 2.0
    backoff_cap: float = 300.0
    late_accept_window: float | None = None  # None: twice the request timeout
    lookup_settle: float | None = None  # None: each provider's (capability.lookup_settle_s)
    key_window_margin: float = 300.0  # no resend starts this long before its key expires
    partitions: int = 6
    replication_factor: int = 1
    metrics_port: int | None = None
    schema_registry_url: str | None = None
    schema_registry_auth: str = ""  # user:password for the registry's basic auth
    schema_registry_ca_file: str | None = None  # the CA of the registry's TLS certificate
    relay_batch_size: int = 2000
    relay_poll_interval: float = 1.0
    relay_workers: int = 2  # pointer-lane relays in one `mailbus relay` (relay/workers.py)
    policy_file: str | None = None  # degradation policies; None: the shipped ones
    queue_cap: int | None = None  # open rows; None: unbounded
    queue_cap_shares: tuple[float, float, float] = DEFAULT_CAP_SHARES  # p2, p1, p0
    webhook_secret: str = ""  # `mailbus webhooks` refuses to start without one
    webhook_listen: tuple[str, int] = ("127.0.0.1", 8026)
    unsubscribe_secret: str = ""  # signs unsubscribe links; empty: campaigns carry none
    # Providers' own delivery events (feedback/native): each route is on when its secret is
    ses_topic_arns: frozenset[str] = frozenset()  # SNS topics whose SES events are taken
    ses_cert_hosts: frozenset[str] = frozenset()  # empty: sns.<region>.amazonaws.com
    ses_ca_file: str | None = None  # TLS trust for certificates; None: the system's CAs
    sendgrid_webhook_key: str = ""  # the Event Webhook's verification key (base64 DER)
    mailgun_webhook_key: str = ""  # the HTTP webhook signing key
    postmark_webhook_auth: str = ""  # user:password of the webhook URL's basic auth
    resend_webhook_secret: str = ""  # whsec_... (Svix)
    unsubscribe_secret_previous: str = ""  # links it signed still verify (rotation)
    unsubscribe_base_url: str | None = None  # where `mailbus webhooks` is reached
    campaign_daily_quota: int | None = None  # recipients per UTC day, all campaigns; None: any
    campaign_import_part: int = 50_000  # audience lines per import transaction
    # The reputation guard (mailbus/campaigns/reputation.py): SES's review thresholds.
    reputation_bounce_rate: float = 0.05  # hard bounces per accepted mail
    reputation_complaint_rate: float = 0.001  # complaints per accepted mail
    reputation_window: float = 86_400.0  # seconds of accepted mail the rates count
    reputation_min_sends: int = 500  # fewer accepted mails in the window: no decision
    reputation_interval: float = 60.0  # seconds between the guard's checks
    kafka_security: KafkaSecurity = _PLAINTEXT  # TLS/SASL: see kafka_client_config
    provider: str = "http"  # http | smtp | resend | postmark | sendgrid | mailgun | ses
    mail_from: str = ""  # MAILBUS_MAIL_FROM: the sender of a named provider's mail
    mailgun_domain: str = ""  # MAILBUS_MAILGUN_DOMAIN: the sending domain (mailgun)
    mailgun_region: str = "us"  # MAILBUS_MAILGUN_REGION: us | eu, the API's base URL
    idempotency_window: float | None = None  # None: the provider's documented window
    provider_key_prefix: str = ""  # before every key the provider sees (kernel/provider_key.py)
    ses_region: str | None = None  # None: the SDK's (AWS_REGION, the profile)
    ses_endpoint_url: str | None = None  # an SES endpoint override (tests: moto)
    ses_access_key_id: str = ""  # empty: the SDK's default credential chain
    ses_secret_access_key: str = ""
    ses_configuration_set: str | None = None  # where SES publishes its events (SNS)
    templates_dir: str | None = None  # local templates (docs/providers.md#templates)
    # mailbus template -> the provider's own template (ses, postmark, sendgrid)
    provider_templates: tuple[tuple[str, str], ...] = ()
    smtp_url: str = ""  # smtp://host:port, smtp+starttls://user@host:587, smtps://...
    smtp_password: str = ""
    smtp_from: str = ""
    smtp_allow_plaintext_auth: bool = False  # smtp://user@host: AUTH without TLS
    # with a provider that has neither an idempotency key nor a look-up (SMTP, ...)
    unknown_outcome: str = "at_most_once"  # at_most_once | at_least_once
    retry_schedule: tuple[float, ...] = ()  # explicit retry delays (s); () = exponential
    max_age: float | None = None  # seconds after created_at with no further retry; None: off
    quota_pause: float = 3600.0  # seconds before the next try of a mail that met a quota
    attempt_warning: int = 3  # the attempt that counts in mailbus_attempt_warnings_total
    recovery_rate: float | None = 100 / 60  # sends/s after an outage; None: no recovery cap
    recovery_ramp: float = 600.0  # seconds until the recovery cap lifts (doubling 4 times)
    recovery_after: float = 30.0  # the shortest outage that starts a recovery ramp
    retention: float = 90 * 86400.0  # settled mail kept this long: also the dedupe window
    retention_recipients: float = 30 * 86400.0  # an ended campaign's recipients kept this long
    retention_campaigns: float = 365 * 86400.0  # an ended campaign's row kept this long
    retention_audit: float = 365 * 86400.0  # console_audit rows kept this long
    # `mailbus console` (docs/guides/console.md)
    console_listen: tuple[str, int] = ("127.0.0.1", 8027)
    console_users_file: str | None = None  # name:role:argon2 hash, one a line
    console_proxy_header: str = ""  # trusted reverse-proxy header naming the user; "": off
    console_proxy_secret: str = ""  # the proxy proves itself with it (X-Mailbus-Proxy-Secret)
    console_proxy_sources: tuple[str, ...] = ()  # or by coming from these networks (CIDR)
    console_secure_cookie: bool = False  # Secure __Host- cookies + HSTS; default: off loopback
    console_max_body: int = 64 * 1024  # bytes of any request but an upload (sign-in included)
    console_upload_max_bytes: int = 256 * 1024**2  # of an audience CSV uploaded
    console_upload_max_rows: int = 1_000_000  # lines of an audience CSV uploaded
    # where spans go (docs/guides/tracing.md): otlp | console; None: no OpenTelemetry at all
    otel_exporter: str | None = None

    def __post_init__(self) -> None:  # every connection of every process finds the schema
        url = with_search_path(self.database_url, self.db_schema)
        object.__setattr__(self, "database_url", url)

    def __repr__(self) -> str:  # never print the API key
        return f"Settings(database={_redact_url(self.database_url)}, kafka={self.kafka_bootstrap})"

    def topic(self, priority: str) -> str:
        return f"{self.topic_prefix}.send.{priority}"

    @property
    def dlq_topic(self) -> str:
        return f"{self.topic_prefix}.send.dlq"

    def provider_for(self, priority: str) -> PriorityProvider | None:
        """The priority's own provider, or None (the default one)."""
        return next((p for p in self.priority_providers if p[0] == priority), None)

    @property
    def events_topic(self) -> str:
        """Where the relay publishes outcome events (schemas/send_event.avsc)."""
        return f"{self.topic_prefix}.send.events"

    @property
    def late_accept_s(self) -> float:
        """How long after a call with no known outcome the provider may still accept it."""
        if self.late_accept_window is not None:
            return self.late_accept_window
        return 2 * self.request_timeout

    @property
    def intake_dlq_topic(self) -> str:
        return f"{self.topic_prefix}.intake.dlq"


def load_env_file(path: Path, environ: MutableMapping[str, str]) -> None:
    """Add the ``KEY=VALUE`` lines of ``path`` to ``environ`` where not already set.

    Parsed by python-dotenv: ``export`` prefixes, ``#`` comments (also after an unquoted
    value), single and double quotes (escapes in double quotes, values over several
    lines). No ``${VAR}`` expansion: a ``$`` in a password stays a ``$``. A line that is
    not ``KEY=VALUE`` raises :class:`ConfigError` naming the file and line.
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--env-file", f"cannot read {path}: {_unread(exc)}") from None
    pairs: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error or (binding.key is not None and binding.value is None):
            line = binding.original.line
            raise ConfigError(f"{path}:{line}", "expected KEY=VALUE")
        if binding.key is not None and binding.value is not None:
            pairs[binding.key] = binding.value
    for key, value in pairs.items():
        environ.setdefault(key, value)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    reader = _Reader(env)
    settings = Settings(
        database_url=reader.database_url("MAILBUS_DATABASE_URL", Settings.database_url),
        database_transaction_pooling=_flag(
            "MAILBUS_DATABASE_TRANSACTION_POOLING", env.get("MAILBUS_DATABASE_TRANSACTION_POOLING")
        ),
        db_schema=parse_schema(env.get("MAILBUS_DB_SCHEMA")),
        kafka_bootstrap=reader.bootstrap("MAILBUS_KAFKA_BOOTSTRAP", Settings.kafka_bootstrap),
        topic_prefix=reader.topic_prefix("MAILBUS_TOPIC_PREFIX", Settings.topic_prefix),
        provider_url=reader.url(
            "MAILBUS_PROVIDER_URL", Settings.provider_url, ("http", "https"), credentials=False
        ),
        provider_api_key=reader.secret("MAILBUS_PROVIDER_API_KEY"),
        provider_api_key_file=reader.secret_file("MAILBUS_PROVIDER_API_KEY"),
        fallback_provider=_fallback_kind(env),
        fallback_provider_url=reader.optional_url(
            "MAILBUS_FALLBACK_PROVIDER_URL", ("http", "https"), credentials=False
        ),
        fallback_provider_api_key=reader.secret("MAILBUS_FALLBACK_PROVIDER_API_KEY"),
        fallback_provider_api_key_file=reader.secret_file("MAILBUS_FALLBACK_PROVIDER_API_KEY"),
        priority_providers=_priority_providers(reader),
        max_in_flight=reader.integer("MAILBUS_MAX_IN_FLIGHT", Settings.max_in_flight, 1, 10_000),
        rate_limit=reader.optional_number("MAILBUS_RATE_LIMIT"),
        fallback_rate_limit=reader.optional_number("MAILBUS_FALLBACK_RATE_LIMIT"),
        connect_timeout=reader.number("MAILBUS_CONNECT_TIMEOUT", Settings.connect_timeout),
        request_timeout=reader.number("MAILBUS_REQUEST_TIMEOUT", Settings.request_timeout),
        max_attempts=reader.integer("MAILBUS_MAX_ATTEMPTS", Settings.max_attempts, 1, 1000),
        backoff_base=reader.number("MAILBUS_BACKOFF_BASE", Settings.backoff_base),
        backoff_cap=reader.number("MAILBUS_BACKOFF_CAP", Settings.backoff_cap),
        late_accept_window=reader.optional_number("MAILBUS_LATE_ACCEPT_WINDOW"),
        lookup_settle=_seconds("MAILBUS_LOOKUP_SETTLE", reader),
        key_window_margin=_seconds("MAILBUS_KEY_WINDOW_MARGIN", reader, Settings.key_window_margin),
        partitions=reader.integer("MAILBUS_PARTITIONS", Settings.partitions, 1, 1000),
        replication_factor=reader.integer(
            "MAILBUS_REPLICATION_FACTOR", Settings.replication_factor, 1, 7
        ),
        metrics_port=reader.optional_integer("MAILBUS_METRICS_PORT", 1, 65535),
        schema_registry_url=reader.optional_url("MAILBUS_SCHEMA_REGISTRY_URL", ("http", "https")),
        schema_registry_auth=reader.secret("MAILBUS_SCHEMA_REGISTRY_AUTH"),
        schema_registry_ca_file=reader.existing_file("MAILBUS_SCHEMA_REGISTRY_CA_FILE"),
        relay_batch_size=reader.integer(
            "MAILBUS_RELAY_BATCH_SIZE", Settings.relay_batch_size, 1, 50_000
        ),
        relay_poll_interval=reader.number(
            "MAILBUS_RELAY_POLL_INTERVAL", Settings.relay_poll_interval
        ),
        relay_workers=reader.integer("MAILBUS_RELAY_WORKERS", Settings.relay_workers, 1, 16),
        policy_file=reader.policy_file("MAILBUS_POLICY_FILE"),
        queue_cap=parse_queue_cap(env.get("MAILBUS_QUEUE_CAP")),
        queue_cap_shares=parse_cap_shares(env.get("MAILBUS_QUEUE_CAP_SHARES")),
        webhook_secret=reader.secret("MAILBUS_WEBHOOK_SECRET"),
        webhook_listen=reader.listen("MAILBUS_WEBHOOK_LISTEN", Settings.webhook_listen),
        console_listen=reader.listen("MAILBUS_CONSOLE_LISTEN", Settings.console_listen),
        console_users_file=reader.existing_file("MAILBUS_CONSOLE_USERS_FILE"),
        console_proxy_header=_header_name(env.get("MAILBUS_CONSOLE_PROXY_HEADER")),
        console_proxy_secret=reader.secret("MAILBUS_CONSOLE_PROXY_SECRET"),
        console_proxy_sources=_networks(
            "MAILBUS_CONSOLE_PROXY_SOURCES", env.get("MAILBUS_CONSOLE_PROXY_SOURCES")
        ),
        console_secure_cookie=_secure_cookie(
            env.get("MAILBUS_CONSOLE_SECURE_COOKIE"),
            reader.listen("MAILBUS_CONSOLE_LISTEN", Settings.console_listen)[0],
        ),
        console_max_body=reader.integer(
            "MAILBUS_CONSOLE_MAX_BODY", Settings.console_max_body, 1024, 16 * 1024**2
        ),
        console_upload_max_bytes=reader.integer(
            "MAILBUS_CONSOLE_UPLOAD_MAX_BYTES", Settings.console_upload_max_bytes, 1024, 2**40
        ),
        console_upload_max_rows=reader.integer(
            "MAILBUS_CONSOLE_UPLOAD_MAX_ROWS", Settings.console_upload_max_rows, 1, 10**9
        ),
        unsubscribe_secret=reader.secret("MAILBUS_UNSUBSCRIBE_SECRET"),
        ses_topic_arns=reader.names("MAILBUS_SES_TOPIC_ARNS"),
        ses_cert_hosts=reader.names("MAILBUS_SES_CERT_HOSTS"),
        ses_ca_file=reader.existing_file("MAILBUS_SES_CA_FILE"),
        sendgrid_webhook_key=reader.secret("MAILBUS_SENDGRID_WEBHOOK_KEY"),
        mailgun_webhook_key=reader.secret("MAILBUS_MAILGUN_WEBHOOK_KEY"),
        postmark_webhook_auth=reader.secret("MAILBUS_POSTMARK_WEBHOOK_AUTH"),
        resend_webhook_secret=reader.secret("MAILBUS_RESEND_WEBHOOK_SECRET"),
        unsubscribe_secret_previous=reader.secret("MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS"),
        unsubscribe_base_url=reader.optional_url("MAILBUS_UNSUBSCRIBE_BASE_URL", ("https", "http")),
        campaign_daily_quota=reader.optional_integer("MAILBUS_CAMPAIGN_DAILY_QUOTA", 1, 10**12),
        campaign_import_part=reader.integer(
            "MAILBUS_CAMPAIGN_IMPORT_PART", Settings.campaign_import_part, 1, 10**7
        ),
        reputation_bounce_rate=reader.share(
            "MAILBUS_REPUTATION_BOUNCE_RATE", Settings.reputation_bounce_rate
        ),
        reputation_complaint_rate=reader.share(
            "MAILBUS_REPUTATION_COMPLAINT_RATE", Settings.reputation_complaint_rate
        ),
        reputation_window=reader.number("MAILBUS_REPUTATION_WINDOW", Settings.reputation_window),
        reputation_min_sends=reader.integer(
            "MAILBUS_REPUTATION_MIN_SENDS", Settings.reputation_min_sends, 1, 10**9
        ),
        reputation_interval=reader.number(
            "MAILBUS_REPUTATION_INTERVAL", Settings.reputation_interval
        ),
        kafka_security=parse_kafka_security(env),
        provider=_provider_kind(env.get("MAILBUS_PROVIDER")),
        mail_from=reader._raw("MAILBUS_MAIL_FROM") or "",
        mailgun_domain=(reader._raw("MAILBUS_MAILGUN_DOMAIN") or "").strip(),
        mailgun_region=_mailgun_region(env.get("MAILBUS_MAILGUN_REGION")),
        idempotency_window=reader.optional_number("MAILBUS_IDEMPOTENCY_WINDOW"),
        provider_key_prefix=_provider_key_prefix(env.get("MAILBUS_PROVIDER_KEY_PREFIX")),
        ses_region=reader._raw("MAILBUS_SES_REGION"),
        ses_endpoint_url=reader.optional_url("MAILBUS_SES_ENDPOINT_URL", ("http", "https")),
        ses_access_key_id=reader.secret("MAILBUS_SES_ACCESS_KEY_ID"),
        ses_secret_access_key=reader.secret("MAILBUS_SES_SECRET_ACCESS_KEY"),
        ses_configuration_set=reader._raw("MAILBUS_SES_CONFIGURATION_SET"),
        templates_dir=_templates_dir(reader._raw("MAILBUS_TEMPLATES_DIR")),
        provider_templates=parse_provider_templates(reader._raw("MAILBUS_PROVIDER_TEMPLATES")),
        smtp_url=reader._raw("MAILBUS_SMTP_URL") or "",
        smtp_password=reader.secret("MAILBUS_SMTP_PASSWORD"),
        smtp_from=reader._raw("MAILBUS_SMTP_FROM") or "",
        unknown_outcome=_unknown_outcome(env),
        otel_exporter=_otel_exporter(env),
        smtp_allow_plaintext_auth=_flag(
            "MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH", env.get("MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH")
        ),
        retry_schedule=_retry_schedule(env.get("MAILBUS_RETRY_SCHEDULE")),
        max_age=_duration("MAILBUS_MAX_AGE", env.get("MAILBUS_MAX_AGE")),
        quota_pause=_duration("MAILBUS_QUOTA_PAUSE", env.get("MAILBUS_QUOTA_PAUSE"))
        or Settings.quota_pause,
        recovery_rate=_recovery_rate(env.get("MAILBUS_RECOVERY_RATE")),
        recovery_ramp=_duration("MAILBUS_RECOVERY_RAMP", env.get("MAILBUS_RECOVERY_RAMP"))
        or Settings.recovery_ramp,
        recovery_after=_recovery_after(env.get("MAILBUS_RECOVERY_AFTER")),
        retention=_retention(env.get("MAILBUS_RETENTION")),
        retention_recipients=_window("MAILBUS_RETENTION_RECIPIENTS", env, 30),
        retention_campaigns=_window("MAILBUS_RETENTION_CAMPAIGNS", env, 365),
        retention_audit=_window("MAILBUS_RETENTION_AUDIT", env, 365),
        attempt_warning=reader.integer(
            "MAILBUS_ATTEMPT_WARNING", Settings.attempt_warning, 1, 1000
        ),
    )
    if settings.unsubscribe_secret_previous and not settings.unsubscribe_secret:
        raise ConfigError(
            "MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS", "set without MAILBUS_UNSUBSCRIBE_SECRET"
        )
    if settings.postmark_webhook_auth and ":" not in settings.postmark_webhook_auth:
        raise ConfigError("MAILBUS_POSTMARK_WEBHOOK_AUTH", "expected user:password")
    named_url = _needs(settings, settings.provider, "MAILBUS_PROVIDER")
    if named_url is not None and not env.get("MAILBUS_PROVIDER_URL"):
        settings = replace(settings, provider_url=named_url)  # the provider's own API
    if settings.fallback_provider is not None:
        settings = _with_fallback(settings, settings.fallback_provider)
    if settings.provider_templates and settings.provider not in _TEMPLATE_PROVIDERS:
        raise ConfigError(
            "MAILBUS_PROVIDER_TEMPLATES",
            f"MAILBUS_PROVIDER={settings.provider} keeps no templates of its own:"
            f" only {', '.join(_TEMPLATE_PROVIDERS)} do",
        )
    if settings.backoff_cap < settings.backoff_base:
        raise ConfigError("MAILBUS_BACKOFF_CAP", "must be at least MAILBUS_BACKOFF_BASE")
    return settings


def _needs(settings: Settings, kind: str, setting: str) -> str | None:
    """Check the settings provider ``kind`` (named by ``setting``: MAILBUS_PROVIDER or
    MAILBUS_FALLBACK_PROVIDER) needs; return its own API's URL (None: not an HTTP API of
    its own: http, smtp, ses)."""
    said = f"{setting}={kind}"
    if kind == "smtp" and not settings.smtp_url:
        raise ConfigError("MAILBUS_SMTP_URL", f"required with {said}")
    if kind == "smtp" and "@" not in settings.smtp_from:
        raise ConfigError("MAILBUS_SMTP_FROM", f"required with {said}: an address")
    if kind == "mailgun" and not settings.mailgun_domain:
        raise ConfigError("MAILBUS_MAILGUN_DOMAIN", f"required with {said}")
    named_url = _NAMED_PROVIDER_URLS.get(kind)
    if kind == "mailgun":
        named_url = _MAILGUN_REGIONS[settings.mailgun_region]
    if (named_url is not None or kind == "ses") and "@" not in settings.mail_from:
        raise ConfigError("MAILBUS_MAIL_FROM", f"required with {said}: an address")
    return named_url


def _with_fallback(settings: Settings, kind: str) -> Settings:
    """MAILBUS_FALLBACK_PROVIDER checked as MAILBUS_PROVIDER is, with its URL: the named
    provider's own API unless MAILBUS_FALLBACK_PROVIDER_URL says otherwise, required for
    the HTTP API. SES and SMTP take their one set of settings (MAILBUS_SES_*,
    MAILBUS_SMTP_*), so neither can be the fallback of itself."""
    if kind in ("ses", "smtp") and kind == settings.provider:
        raise ConfigError(
            "MAILBUS_FALLBACK_PROVIDER",
            f"{kind} is MAILBUS_PROVIDER already: a fallback must be another provider",
        )
    named_url = _needs(settings, kind, "MAILBUS_FALLBACK_PROVIDER")
    url = settings.fallback_provider_url or named_url
    if url is None and kind == "http":
        raise ConfigError(
            "MAILBUS_FALLBACK_PROVIDER_URL", "required with MAILBUS_FALLBACK_PROVIDER=http"
        )
    return replace(settings, fallback_provider_url=url)


def _fallback_kind(env: Mapping[str, str]) -> str | None:
    """MAILBUS_FALLBACK_PROVIDER; unset, ``http`` when MAILBUS_FALLBACK_PROVIDER_URL is
    given (the fallback before any other could be named), else no fallback."""
    raw = env.get("MAILBUS_FALLBACK_PROVIDER")
    if raw is None or not raw.strip():
        return "http" if (env.get("MAILBUS_FALLBACK_PROVIDER_URL") or "").strip() else None
    return _provider_kind(raw, "MAILBUS_FALLBACK_PROVIDER")


# MAILBUS_PROVIDER's named providers and their APIs (MAILBUS_PROVIDER_URL overrides, e.g.
# the sandbox's dialect of it in tests)
_NAMED_PROVIDER_URLS = {
    "resend": "https://api.resend.com",
    "postmark": "https://api.postmarkapp.com",
    "sendgrid": "https://api.sendgrid.com",  # an EU subuser: https://api.eu.sendgrid.com
    "mailgun": "https://api.mailgun.net",  # per MAILBUS_MAILGUN_REGION, below
}
# https://documentation.mailgun.com/docs/mailgun/api-reference/api-overview
_MAILGUN_REGIONS = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}
_PROVIDER_KINDS = ("http", "smtp", "ses", *_NAMED_PROVIDER_URLS)  # ses: through the AWS SDK


_TEMPLATE_PROVIDERS = ("ses", "postmark", "sendgrid")  # providers with templates of their own


@overload
def _seconds(name: str, reader: _Reader) -> float | None: ...
@overload
def _seconds(name: str, reader: _Reader, default: float) -> float: ...
def _seconds(name: str, reader: _Reader, default: float | None = None) -> float | None:
    """A number of seconds >= 0 (0 allowed, unlike :meth:`_Reader.number`), or ``default``
    when unset."""
    raw = reader._raw(name)
    if raw is None:
        return default
    try:
        if float(raw) == 0:
            return 0.0
    except ValueError:
        pass  # reader.number names the setting
    return reader.number(name, 0.0)


def _templates_dir(raw: str | None) -> str | None:
    if raw is not None and not Path(raw).is_dir():
        raise ConfigError("MAILBUS_TEMPLATES_DIR", f"no such directory: {raw}")
    return raw


def parse_provider_templates(raw: str | None) -> tuple[tuple[str, str], ...]:
    """``name=provider_template[,name=provider_template...]`` as pairs; a malformed entry,
    an empty side, whitespace inside a name or a template named twice is a
    :class:`ConfigError`."""
    if raw is None or not raw.strip():
        return ()
    pairs: dict[str, str] = {}
    for entry in raw.split(","):
        name, sep, reference = (part.strip() for part in entry.partition("="))
        if not sep or not name or not reference:
            raise ConfigError(
                "MAILBUS_PROVIDER_TEMPLATES", f"expected template=provider_template, got {entry!r}"
            )
        if any(ch.isspace() or ch == "=" for ch in name + reference):
            raise ConfigError(
                "MAILBUS_PROVIDER_TEMPLATES", f"no whitespace or '=' in a name: {entry.strip()!r}"
            )
        if name in pairs:
            raise ConfigError("MAILBUS_PROVIDER_TEMPLATES", f"template {name!r} mapped twice")
        pairs[name] = reference
    return tuple(pairs.items())


def _provider_key_prefix(raw: str | None) -> str:
    prefix = (raw or "").strip()
    problem = prefix_problem(prefix)
    if problem is not None:
        raise ConfigError("MAILBUS_PROVIDER_KEY_PREFIX", problem)
    return prefix


def _mailgun_region(raw: str | None) -> str:
    region = (raw or "us").strip().lower() or "us"
    if region not in _MAILGUN_REGIONS:
        raise ConfigError("MAILBUS_MAILGUN_REGION", f"expected us or eu, got {raw!r}")
    return region


def _provider_kind(raw: str | None, setting: str = "MAILBUS_PROVIDER") -> str:
    kind = (raw or "http").strip().lower() or "http"
    if kind not in _PROVIDER_KINDS:
        raise ConfigError(setting, f"expected one of {', '.join(_PROVIDER_KINDS)}, got {raw!r}")
    return kind


def _unknown_outcome(env: Mapping[str, str]) -> str:
    """MAILBUS_UNKNOWN_OUTCOME, or its older name MAILBUS_SMTP_UNKNOWN."""
    name = "MAILBUS_UNKNOWN_OUTCOME" if "MAILBUS_UNKNOWN_OUTCOME" in env else "MAILBUS_SMTP_UNKNOWN"
    raw = env.get(name)
    policy = (raw or "").strip().lower() or "at_most_once"
    if policy not in ("at_most_once", "at_least_once"):
        raise ConfigError(name, f"expected at_most_once or at_least_once, got {raw!r}")
    return policy


def _otel_exporter(env: Mapping[str, str]) -> str | None:
    """MAILBUS_OTEL_EXPORTER (otlp, console, none); unset, OpenTelemetry's own
    OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ form) turns OTLP on."""
    raw = env.get("MAILBUS_OTEL_EXPORTER")
    if raw is None or not raw.strip():
        otlp = "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        return "otlp" if any(env.get(name, "").strip() for name in otlp) else None
    exporter = raw.strip().lower()
    if exporter not in ("otlp", "console", "none"):
        raise ConfigError("MAILBUS_OTEL_EXPORTER", f"expected otlp, console or none, got {raw!r}")
    return None if exporter == "none" else exporter


def _header_name(raw: str | None) -> str:
    """An HTTP header's name (a token), or "" when unset."""
    name = (raw or "").strip()
    if name and not all(ch.isalnum() or ch == "-" for ch in name):
        raise ConfigError("MAILBUS_CONSOLE_PROXY_HEADER", f"not an HTTP header name: {raw!r}")
    return name


def _networks(name: str, raw: str | None) -> tuple[str, ...]:
    """Comma-separated addresses or CIDR networks, checked; unset: none."""
    parts = [part.strip() for part in (raw or "").split(",") if part.strip()]
    try:
        return tuple(str(ipaddress.ip_network(part, strict=False)) for part in parts)
    except ValueError as exc:
        raise ConfigError(name, f"not an address or network: {exc}") from None


def _secure_cookie(raw: str | None, host: str) -> bool:
    """MAILBUS_CONSOLE_SECURE_COOKIE; unset: on unless the console listens on loopback."""
    if raw is not None and raw.strip():
        return _flag("MAILBUS_CONSOLE_SECURE_COOKIE", raw)
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def _flag(name: str, raw: str | None) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``); unset: false."""
    text = (raw or "").strip().lower()
    if text in ("", "false", "0", "no", "off"):
        return False
    if text in ("true", "1", "yes", "on"):
        return True
    raise ConfigError(name, f"expected true or false, got {raw!r}")


def _retry_schedule(raw: str | None) -> tuple[float, ...]:
    return () if raw is None or not raw.strip() else parse_schedule(raw)


def _duration(name: str, raw: str | None) -> float | None:
    return None if raw is None or not raw.strip() else parse_duration(raw, name)


def _priority_providers(reader: _Reader) -> tuple[PriorityProvider, ...]:
    """``MAILBUS_PROVIDER_P0_URL`` (P1, P2) with its ``_API_KEY`` (or its file), where set."""
    found = []
    for priority in ("p0", "p1", "p2"):
        name = f"MAILBUS_PROVIDER_{priority.upper()}"
        url = reader.optional_url(f"{name}_URL", ("http", "https"), credentials=False)
        if url is not None:
            key = f"{name}_API_KEY"
            found.append(
                PriorityProvider(priority, url, reader.secret(key), reader.secret_file(key))
            )
        elif reader.secret(f"{name}_API_KEY"):
            raise ConfigError(f"{name}_URL", f"required with {name}_API_KEY")
    return tuple(found)


def _recovery_after(raw: str | None) -> float:
    """A duration such as ``30s``; ``0`` (every outage starts a ramp) is allowed."""
    if raw is not None and raw.strip() in ("0", "0s"):
        return 0.0
    return _duration("MAILBUS_RECOVERY_AFTER", raw) or Settings.recovery_after


_MIN_RETENTION_S = 86400.0  # "90m" for "90d" would shrink the dedupe window to minutes


def _retention(raw: str | None) -> float:
    """MAILBUS_RETENTION: a duration of at least a day (``90d``, the default)."""
    seconds = _duration("MAILBUS_RETENTION", raw) or Settings.retention
    if seconds < _MIN_RETENTION_S:
        raise ConfigError(
            "MAILBUS_RETENTION", f"must be at least 1d (it is the dedupe window), got {raw!r}"
        )
    return seconds


def _window(name: str, env: Mapping[str, str], default_days: int) -> float:
    """A retention window of its own (``30d``): at least a day, as mailbus_prune_history
    (migration 0062) demands."""
    raw = env.get(name)
    seconds = _duration(name, raw) or default_days * 86400.0
    if seconds < _MIN_RETENTION_S:
        raise ConfigError(name, f"must be at least 1d, got {raw!r}")
    return seconds


def _recovery_rate(raw: str | None) -> float | None:
    """``100/min`` (the default), ``0`` or ``off``: no recovery cap."""
    text = "100/min" if raw is None or not raw.strip() else raw.strip()
    return None if text.lower() == "off" else parse_rate(text, "MAILBUS_RECOVERY_RATE")


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def _raw(self, name: str) -> str | None:
        value = self._env.get(name)
        return None if value is None or value.strip() == "" else value.strip()

    def url(
        self,
        name: str,
        default: str,
        schemes: tuple[str, ...],
        from_file: bool = False,
        credentials: bool = True,
    ) -> str:
        """``credentials=False``: a URL that is shown (`mailbus status`, logs) must carry
        no ``user:password@``; the key has its own secret setting."""
        value = (self.secret(name) if from_file else self._raw(name)) or default
        try:
            parts = urlsplit(value)
        except ValueError as exc:  # its text unquoted: it may hold a password
            raise ConfigError(name, f"expected a {schemes[0]}:// URL: {exc}") from None
        if parts.scheme not in schemes or not (parts.hostname or parts.path):
            raise ConfigError(name, f"expected a {schemes[0]}:// URL, got {_redact_url(value)!r}")
        if not credentials and "@" in parts.netloc:
            raise ConfigError(
                name, "must not carry credentials (user:password@): give the key in its _API_KEY"
            )
        return value

    def database_url(self, name: str, default: str) -> str:
        """A PostgreSQL URL (it may carry a password: ``_FILE`` too) that libpq can read: an
        option it does not know, a ``%`` not followed by two hex digits (a password's own is
        written ``%25``) is this setting's error, not every command's traceback quoting it."""
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        value = self.url(name, default, ("postgresql", "postgres"), True)
        try:
            conninfo_to_dict(value)
        except ProgrammingError as exc:
            problem = str(exc).partition(":")[0]  # after it libpq quotes the text: a password?
            raise ConfigError(
                name, f"libpq cannot read {_redact_url(value)!r}: {problem}"
            ) from None
        return value

    def optional_url(
        self, name: str, schemes: tuple[str, ...], credentials: bool = True
    ) -> str | None:
        if self._raw(name) is None:
            return None
        return self.url(name, "", schemes, credentials=credentials)

    def bootstrap(self, name: str, default: str) -> str:
        value = self._raw(name) or default
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(name, f"expected host:port[,host:port], got {value!r}")
        return value

    def topic_prefix(self, name: str, default: str) -> str:
        value = self._raw(name) or default
        if not all(ch.isalnum() or ch in "._-" for ch in value) or len(value) > 200:
            raise ConfigError(name, "may contain only letters, digits, '.', '_' and '-'")
        return value

    def listen(self, name: str, default: tuple[str, int]) -> tuple[str, int]:
        """``host:port`` (``[::1]:8026`` for IPv6); port 0 binds any free port."""
        raw = self._raw(name)
        if raw is None:
            return default
        host, sep, port = raw.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(name, f"expected host:port, got {raw!r}")
        return host, int(port)

    def secret(self, name: str) -> str:
        file_name = self._raw(f"{name}_FILE")
        if file_name:
            try:
                return Path(file_name).read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{name}_FILE", f"cannot read: {_unread(exc)}") from None
        return self._raw(name) or ""

    def secret_file(self, name: str) -> str | None:
        """The file ``name`` was read from (``{name}_FILE``), for a key read again when that
        file changes (consumer/key_file.py); None when it was given directly."""
        return self._raw(f"{name}_FILE")

    def names(self, name: str) -> frozenset[str]:
        """A comma-separated list, blanks dropped."""
        raw = self._raw(name) or ""
        return frozenset(part.strip() for part in raw.split(",") if part.strip())

    def existing_file(self, name: str) -> str | None:
        path = self._raw(name)
        if path is not None and not Path(path).is_file():
            raise ConfigError(name, f"no such file: {path}")
        return path

    def number(self, name: str, default: float) -> float:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(name, f"expected a number, got {raw!r}") from None
        if not value > 0 or value == float("inf"):
            raise ConfigError(name, f"must be a positive number, got {raw!r}")
        return value

    def share(self, name: str, default: float) -> float:
        """A share of a whole, above 0 and at most 1 (``0.05``: 5%)."""
        value = self.number(name, default)
        if value > 1:
            raise ConfigError(name, f"must be a share of at most 1 (0.05 for 5%), got {value:g}")
        return value

    def optional_number(self, name: str) -> float | None:
        return None if self._raw(name) is None else self.number(name, 0.0)

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(name, f"expected an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(name, f"must be between {low} and {high}, got {value}")
        return value

    def optional_integer(self, name: str, low: int, high: int) -> int | None:
        return None if self._raw(name) is None else self.integer(name, 0, low, high)

    def policy_file(self, name: str) -> str | None:
        path = self._raw(name)
        if path is not None:
            if not Path(path).is_file():
                raise ConfigError(name, f"no such file: {path}")
            load_policy_book(path)  # a malformed file fails at start-up, naming the entry
        return path


def _unread(exc: OSError | UnicodeDecodeError) -> str:
    """Why a file was not read, without quoting it (it may hold a password)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    return str(exc.strerror)


def _redact_url(url: str) -> str:
    """``url`` with its password, or a user name alone (an API key), masked."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    if parts.username:
        return url.replace(f"{parts.username}@", "***@", 1)
    return url
