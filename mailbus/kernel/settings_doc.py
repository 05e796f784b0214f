"""The one table of MAILBUS_* settings: name, default, meaning and the commands using it.

``mailbus COMMAND --help`` ends with :func:`epilog` of that command, built from this table;
tests/unit/test_settings_doc.py checks that every variable :func:`load_settings` reads and
every ``MAILBUS_*`` name in the code is in it, so help and code cannot drift apart.
``python -m mailbus.kernel.settings_doc > docs/configuration.md`` (``make docs``) writes the
reference of :func:`markdown`; a test keeps the committed file equal to it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = [
    "SETTINGS",
    "Setting",
    "add_command",
    "epilog",
    "markdown",
    "names",
]

# Commands grouped by what they touch.
_LONG_RUNNING = frozenset({"relay", "consume", "intake", "webhooks", "console"})
_KAFKA = frozenset({"migrate", "relay", "consume", "intake", "dlq", "campaign"})
_ENQUEUE = frozenset({"relay", "consume", "intake", "campaign"})
ALL: frozenset[str] = frozenset()  # every command


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    meaning: str
    commands: frozenset[str] = ALL  # empty: every command
    from_file: bool = False  # NAME_FILE names a file holding the value

    def used_by(self, command: str) -> bool:
        return not self.commands or command in self.commands


def _s(
    name: str, default: str, meaning: str, commands: frozenset[str] | set[str] = ALL, **kw: bool
) -> Setting:
    return Setting(f"MAILBUS_{name}", default, meaning, frozenset(commands), **kw)


SETTINGS: tuple[Setting, ...] = (
    _s("DATABASE_URL", "postgresql://localhost/mailbus", "PostgreSQL URL", from_file=True),
    _s(
        "DATABASE_TRANSACTION_POOLING",
        "false",
        "true: MAILBUS_DATABASE_URL goes through a transaction-pooling PgBouncer, so the"
        " connections prepare no statements; relay, migrate, console, a campaign import or"
        " run, retention, dlq replay and suppress import, which need a session of their own,"
        " exit 2 with it (docs/guides/pgbouncer.md)",
        {"consume", "webhooks", "intake", "relay", "migrate", "console", "campaign"}
        | {"retention", "dlq", "suppress"},
    ),
    _s(
        "DB_SCHEMA",
        "mailbus",
        "the PostgreSQL schema of mailbus's tables, views and functions (a plain identifier;"
        " `mailbus migrate` creates it and moves an install from `public` into it); every"
        " connection's search_path is this schema, then public",
    ),
    _s("KAFKA_BOOTSTRAP", "127.0.0.1:9092", "Kafka bootstrap servers (host:port,...)", _KAFKA),
    _s("TOPIC_PREFIX", "mailbus", "prefix of every mailbus topic", _KAFKA),
    _s(
        "PROVIDER_URL",
        "the local sandbox",
        "base URL of the email API; no user:password@ (exit 2: the key has its own setting)",
        {"consume"},
    ),
    _s(
        "PROVIDER_API_KEY",
        "-",
        "API key of the email API; never logged",
        {"consume", "sandbox"},
        from_file=True,
    ),
    *(
        setting
        for priority in ("P0", "P1", "P2")
        for setting in (
            _s(
                f"PROVIDER_{priority}_URL",
                "off",
                f"{priority} mail's own HTTP provider (e.g. a transactional one); a"
                " consumer process then serves only priorities with the same provider",
                {"consume"},
            ),
            _s(f"PROVIDER_{priority}_API_KEY", "-", "its API key", {"consume"}, from_file=True),
        )
    ),
    _s(
        "FALLBACK_PROVIDER",
        "off (http with a FALLBACK_PROVIDER_URL)",
        "second provider for fallback-policy mail while the primary is down: any"
        " MAILBUS_PROVIDER but the primary's ses or smtp, under its own guarantee",
        {"consume", "webhooks"},
    ),
    _s(
        "FALLBACK_PROVIDER_URL",
        "off; a named one's own API",
        "its URL (required for http)",
        {"consume"},
    ),
    _s("FALLBACK_PROVIDER_API_KEY", "-", "its API key", {"consume"}, from_file=True),
    _s("MAX_IN_FLIGHT", "32", "concurrent provider calls per process", {"consume"}),
    _s("RATE_LIMIT", "unlimited", "provider requests/s, all consumers together", {"consume"}),
    _s(
        "FALLBACK_RATE_LIMIT",
        "unlimited",
        "fallback provider requests/s, all consumers together (a bucket of its own)",
        {"consume"},
    ),
    _s("CONNECT_TIMEOUT", "2", "seconds to connect to the provider", {"consume"}),
    _s("REQUEST_TIMEOUT", "15", "seconds for one provider call", {"consume"}),
    _s("MAX_ATTEMPTS", "8", "provider calls before a row is failed", {"consume"}),
    _s("BACKOFF_BASE", "2", "seconds: first retry delay (doubling, jittered)", {"consume"}),
    _s("BACKOFF_CAP", "300", "seconds: longest retry delay", {"consume"}),
    _s(
        "RETRY_SCHEDULE",
        "off (exponential)",
        "explicit retry delays, e.g. 5m,30m,2h,24h; failed after the last",
        {"consume"},
    ),
    _s(
        "MAX_AGE",
        "off",
        "no retry this long after created_at (e.g. 24h): failed, dead letter max_age",
        {"consume"},
    ),
    _s(
        "QUOTA_PAUSE",
        "1h",
        "the next try of a mail the provider refused for a sending quota (Resend, SES daily"
        " quota): no attempt spent; a longer Retry-After wins (docs/providers.md)",
        {"consume"},
    ),
    _s(
        "ATTEMPT_WARNING",
        "3",
        "a mail reaching this attempt counts in mailbus_attempt_warnings_total (alert"
        " MailbusMailRetrying)",
        {"consume"},
    ),
    _s(
        "RECOVERY_RATE",
        "100/min",
        "after an outage, sends capped at this rate (all consumers together, P0 first);"
        " 0 or off: no recovery cap",
        {"consume"},
    ),
    _s(
        "RECOVERY_RAMP",
        "10m",
        "how long the recovery cap lasts; it doubles every quarter of it (16x at the end)",
        {"consume"},
    ),
    _s(
        "RETENTION",
        "90d",
        "settled mail (and its attempts, dead letters, delivery events) older than this is"
        " deleted by `mailbus retention run`; also the dedupe window: inside it the same"
        " dedupe key is never enqueued twice; at least 1d",
        {"retention"},
    ),
    _s(
        "RETENTION_RECIPIENTS",
        "30d",
        "a finished or cancelled campaign's recipients (addresses and variables) are deleted"
        " by `mailbus retention run` this long after it ended; at least 1d",
        {"retention"},
    ),
    _s(
        "RETENTION_CAMPAIGNS",
        "365d",
        "a finished or cancelled campaign's row (name, figures) is deleted this long after it"
        " ended, once its recipients are gone; at least 1d",
        {"retention"},
    ),
    _s(
        "RETENTION_AUDIT",
        "365d",
        "console_audit rows older than this are deleted by `mailbus retention run`; at least 1d",
        {"retention"},
    ),
    _s(
        "RECOVERY_AFTER",
        "30s",
        "the shortest outage (breaker not closed) that starts a recovery ramp",
        {"consume"},
    ),
    _s(
        "PROVIDER",
        "http",
        "which provider the consumer calls: http (the sandbox's API), smtp, resend,"
        " postmark, sendgrid, mailgun, ses (docs/providers.md); give webhooks the same,"
        " so a named provider's events match only its sends",
        {"consume", "webhooks"},
    ),
    _s(
        "PROVIDER_KEY_PREFIX",
        "none",
        "put before every key the provider sees (e.g. staging:), so deployments sharing one"
        " provider account never share a key; up to 32 of A-Z a-z 0-9 . _ : -"
        " (docs/providers.md#the-key-the-provider-sees)",
        {"consume", "send", "console", "webhooks"},
    ),
    _s(
        "MAIL_FROM",
        "-",
        "sender address of a named provider's mail (resend, postmark, sendgrid, mailgun, ses)",
        {"consume"},
    ),
    _s("MAILGUN_DOMAIN", "-", "Mailgun's sending domain (required with mailgun)", {"consume"}),
    _s(
        "MAILGUN_REGION",
        "us",
        "Mailgun's region: us (api.mailgun.net) or eu (api.eu.mailgun.net)",
        {"consume"},
    ),
    _s(
        "IDEMPOTENCY_WINDOW",
        "the provider's",
        "seconds a named provider keeps an idempotency key (resend: 86400; only shorter);"
        " for tests",
        {"consume"},
    ),
    _s(
        "TEMPLATES_DIR",
        "-",
        "directory of local templates, a folder per template: subject.txt, text.txt,"
        " optional html.html (Jinja2, sandboxed, html autoescaped); read once per process",
        {"consume"},
    ),
    _s(
        "PROVIDER_TEMPLATES",
        "-",
        "templates sent by the provider's own template (ses, postmark, sendgrid):"
        " name=provider_template[,...], e.g. order_confirmation=d-abc123",
        {"consume"},
    ),
    _s("SES_REGION", "the SDK's", "AWS region of SES (provider ses)", {"consume"}),
    _s("SES_ENDPOINT_URL", "AWS's", "SES endpoint override, e.g. moto in tests", {"consume"}),
    _s(
        "SES_ACCESS_KEY_ID",
        "the SDK's chain",
        "AWS access key id for SES; unset: the SDK's default credential chain",
        {"consume"},
        from_file=True,
    ),
    _s(
        "SES_SECRET_ACCESS_KEY",
        "-",
        "the secret of MAILBUS_SES_ACCESS_KEY_ID",
        {"consume"},
        from_file=True,
    ),
    _s(
        "SES_CONFIGURATION_SET",
        "-",
        "SES configuration set a mail is sent with (its SNS event destination)",
        {"consume"},
    ),
    _s(
        "SMTP_URL",
        "-",
        "smtp://host:port, smtp+starttls://user@host:587 or smtps://user@host:465",
        {"consume"},
    ),
    _s("SMTP_PASSWORD", "-", "SMTP AUTH password (user from the URL)", {"consume"}, from_file=True),
    _s("SMTP_FROM", "-", "sender address (also the Message-ID domain)", {"consume"}),
    _s(
        "SMTP_ALLOW_PLAINTEXT_AUTH",
        "false",
        "true: allow smtp://user@host, which sends the AUTH password without TLS (refused"
        " at start otherwise)",
        {"consume"},
    ),
    _s(
        "UNKNOWN_OUTCOME",
        "at_most_once",
        "a call with no known outcome at a provider with neither idempotency key nor look-up"
        " (SMTP, ...): stay unknown for an operator, or at_least_once (resend)",
        {"consume"},
    ),
    _s("SMTP_UNKNOWN", "at_most_once", "older name of MAILBUS_UNKNOWN_OUTCOME", {"consume"}),
    _s(
        "LATE_ACCEPT_WINDOW",
        "2 x request timeout",
        "seconds the provider may still accept a call with no known outcome",
        {"consume"},
    ),
    _s(
        "LOOKUP_SETTLE",
        "the provider's (postmark: 300)",
        'seconds after a call in doubt began before a look-up\'s "not found" counts; until'
        " then the row stays unknown and is looked up again, never resent (0: at once)",
        {"consume"},
    ),
    _s(
        "KEY_WINDOW_MARGIN",
        "300",
        "seconds before an idempotency key's window ends (resend: 24 h from the first call)"
        " that no resend under it starts: the slot wait, connect and request timeouts and"
        " clock skew; never less than the first three together",
        {"consume"},
    ),
    _s("PARTITIONS", "6", "partitions of each send topic migrate creates", {"migrate"}),
    _s("REPLICATION_FACTOR", "1", "replication factor of the topics migrate creates", {"migrate"}),
    _s("METRICS_PORT", "off", "port of /metrics, /healthz, /readyz", _LONG_RUNNING),
    _s("METRICS_ADDR", "127.0.0.1", "address the metrics port binds", _LONG_RUNNING),
    _s(
        "OTEL_EXPORTER",
        "off (otlp if OTEL_EXPORTER_OTLP_ENDPOINT is set)",
        "where the spans of a mail go (relay, consumer, intake, webhooks): otlp (the"
        " OTEL_EXPORTER_OTLP_* variables), console, or none; needs the extra"
        " mailbus[tracing] (docs/guides/tracing.md)",
        {"relay", "consume", "intake", "webhooks"},
    ),
    _s("SCHEMA_REGISTRY_URL", "off", "Confluent-compatible schema registry", _KAFKA),
    _s(
        "SCHEMA_REGISTRY_AUTH",
        "-",
        "user:password of the registry's HTTP basic auth",
        _KAFKA,
        from_file=True,
    ),
    _s("SCHEMA_REGISTRY_CA_FILE", "system CAs", "CA of the registry's TLS certificate", _KAFKA),
    _s("RELAY_BATCH_SIZE", "2000", "rows the relay claims per batch", {"relay"}),
    _s(
        "RELAY_POLL_INTERVAL",
        "1",
        "seconds between relay polls without NOTIFY (and, at most, between its claims of"
        " dead letters while new sends wake it)",
        {"relay"},
    ),
    _s(
        "RELAY_WORKERS",
        "2",
        "pointer-lane workers in one relay process, each claiming and publishing its own"
        " batches (1-16; the outcome-event lane is always one)",
        {"relay"},
    ),
    _s("POLICY_FILE", "the shipped policies", "mail policies (expiry, fallback)", _ENQUEUE),
    _s(
        "QUEUE_CAP",
        "unbounded",
        "open rows before enqueues are refused (and campaigns wait)",
        _ENQUEUE,
    ),
    _s("QUEUE_CAP_SHARES", "p2,p1,p0 shares", "where each priority is refused", _ENQUEUE),
    _s(
        "WEBHOOK_SECRET",
        "-",
        "HMAC secret of delivery events (the sandbox signs with it); webhooks needs it",
        {"webhooks", "sandbox"},
        from_file=True,
    ),
    _s(
        "WEBHOOK_LISTEN",
        "127.0.0.1:8026",
        "host:port of the webhooks receiver ([::1]:8026 for IPv6; port 0: any free one)",
        {"webhooks"},
    ),
    _s(
        "CONSOLE_LISTEN",
        "127.0.0.1:8027",
        "host:port of the operator's web console (it serves whoever reaches it: keep it"
        " on loopback or behind a proxy)",
        {"console"},
    ),
    _s(
        "CONSOLE_USERS_FILE",
        "-",
        "the console's users, one `name:role:argon2 hash` a line (role viewer or operator;"
        " `mailbus console hash-password` prints a line)",
        {"console"},
    ),
    _s(
        "CONSOLE_PROXY_HEADER",
        "off",
        "a header set by a trusted reverse proxy naming the signed-in user (e.g."
        " X-Forwarded-User); its role comes from the users file, else viewer",
        {"console"},
    ),
    _s(
        "CONSOLE_PROXY_SECRET",
        "-",
        "with CONSOLE_PROXY_HEADER: the header is believed only on requests that carry this"
        " value in X-Mailbus-Proxy-Secret (the proxy adds it) or come from"
        " CONSOLE_PROXY_SOURCES; one of the two is required",
        {"console"},
        from_file=True,
    ),
    _s(
        "CONSOLE_PROXY_SOURCES",
        "-",
        "with CONSOLE_PROXY_HEADER: addresses or CIDR networks (comma-separated) of the"
        " proxy; their requests may name the user, and sign-ins count X-Forwarded-For's"
        " last address as the source",
        {"console"},
    ),
    _s(
        "CONSOLE_SECURE_COOKIE",
        "on off loopback",
        "`Secure` cookies with the `__Host-` prefix and an HSTS header (serve it over"
        " TLS, at a proxy or itself); unset: on unless CONSOLE_LISTEN is a loopback address",
        {"console"},
    ),
    _s(
        "CONSOLE_MAX_BODY",
        "65536",
        "bytes of any request body but an audience upload, sign-in included (413 beyond)",
        {"console"},
    ),
    _s(
        "CONSOLE_UPLOAD_MAX_BYTES",
        "268435456",
        "bytes of an audience CSV uploaded in the console (refused beyond, nothing created)",
        {"console"},
    ),
    _s(
        "CONSOLE_UPLOAD_MAX_ROWS",
        "1000000",
        "lines of an audience CSV uploaded in the console, its header excluded (refused"
        " beyond, nothing created)",
        {"console"},
    ),
    _s(
        "SES_TOPIC_ARNS",
        "off",
        "SNS topic ARNs (comma-separated) whose SES events POST /webhooks/ses takes; sets"
        " that route up (SNS signature checked, subscriptions confirmed)",
        {"webhooks"},
    ),
    _s(
        "SES_CERT_HOSTS",
        "sns.<region>.amazonaws.com",
        "hosts SNS signing certificates and SubscribeURLs may come from (https only)",
        {"webhooks"},
    ),
    _s("SES_CA_FILE", "system CAs", "PEM CA that fetching SNS certificates trusts", {"webhooks"}),
    _s(
        "SENDGRID_WEBHOOK_KEY",
        "off",
        "SendGrid Event Webhook verification key (base64); sets up POST /webhooks/sendgrid",
        {"webhooks"},
        from_file=True,
    ),
    _s(
        "MAILGUN_WEBHOOK_KEY",
        "off",
        "Mailgun HTTP webhook signing key; sets up POST /webhooks/mailgun (the sandbox signs"
        " its Mailgun events with it)",
        {"webhooks", "sandbox"},
        from_file=True,
    ),
    _s(
        "POSTMARK_WEBHOOK_AUTH",
        "off",
        "user:password of the Postmark webhook URL's basic auth; sets up POST"
        " /webhooks/postmark (the sandbox sends its Postmark events with it)",
        {"webhooks", "sandbox"},
        from_file=True,
    ),
    _s(
        "RESEND_WEBHOOK_SECRET",
        "off",
        "Resend (Svix) signing secret, whsec_...; sets up POST /webhooks/resend (the sandbox"
        " signs its Resend events with it)",
        {"webhooks", "sandbox"},
        from_file=True,
    ),
    _s(
        "UNSUBSCRIBE_SECRET",
        "off (no links)",
        "HMAC secret of campaign unsubscribe links",
        {"relay", "campaign", "webhooks"},
        from_file=True,
    ),
    _s(
        "UNSUBSCRIBE_SECRET_PREVIOUS",
        "off",
        "the secret before the last rotation: links it signed are still accepted",
        {"webhooks"},
        from_file=True,
    ),
    _s(
        "UNSUBSCRIBE_BASE_URL",
        "-",
        "public URL of `mailbus webhooks`; links are <it>/unsubscribe/<token>",
        {"relay", "campaign"},
    ),
    _s(
        "CAMPAIGN_DAILY_QUOTA",
        "unlimited",
        "recipients handed out per UTC day by all campaigns together, shared fairly",
        {"relay", "campaign"},
    ),
    _s(
        "CAMPAIGN_IMPORT_PART",
        "50000",
        "audience lines per import transaction: a started campaign's first part goes out"
        " while the rest is read; an import that stopped goes on from its last part",
        {"campaign"},
    ),
    _s(
        "REPUTATION_BOUNCE_RATE",
        "0.05",
        "hard bounces per accepted mail (in the window, a share of at most 1) at which the"
        " reputation guard pauses a campaign: SES reviews an account at 5%",
        {"relay"},
    ),
    _s(
        "REPUTATION_COMPLAINT_RATE",
        "0.001",
        "complaints per accepted mail (a share of at most 1) at which the guard pauses a"
        " campaign: SES reviews at 0.1%",
        {"relay"},
    ),
    _s(
        "REPUTATION_WINDOW",
        "86400",
        "seconds of accepted mail the guard's rates count (a sliding window)",
        {"relay"},
    ),
    _s(
        "REPUTATION_MIN_SENDS",
        "500",
        "accepted mails a campaign needs in the window before the guard judges its rates",
        {"relay"},
    ),
    _s("REPUTATION_INTERVAL", "60", "seconds between the guard's checks", {"relay"}),
    _s("INTAKE_TOPIC", "orders.events", "topic of the domain events", {"intake"}),
    _s(
        "INTAKE_MAPPINGS", "schemas/intake_mappings.json", "event type -> mail mappings", {"intake"}
    ),
    _s("INTAKE_BATCH", "1000", "events per INSERT statement and per commit", {"intake"}),
    _s("INTAKE_BATCH_WAIT", "0.2", "seconds a partial batch waits for more events", {"intake"}),
    _s("INTAKE_GROUP", "{prefix}-intake", "consumer group and faust app id", {"intake"}),
    _s(
        "INTAKE_SESSION_TIMEOUT",
        "30",
        "seconds until a killed member's partitions move",
        {"intake"},
    ),
    _s("INTAKE_WEB_PORT", "off", "faust's web server port", {"intake"}),
    _s(
        "INTAKE_MAX_AGE",
        "3d",
        "an event older than this by its occurred_at (e.g. 72h) is recorded expired, not"
        " mailed; a mail's expiry counts from occurred_at too",
        {"intake"},
    ),
    _s("STATE_DIR", "a temporary dir", "faust's data dir goes under it", {"intake"}),
    _s(
        "OPERATOR",
        "the login name",
        "who replays, resolves or cancels, recorded in the audit",
        {"dlq", "send"},
    ),
    _s(
        "KAFKA_SECURITY_PROTOCOL",
        "PLAINTEXT",
        "security.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        _KAFKA,
    ),
    _s(
        "KAFKA_SASL_MECHANISM",
        "-",
        "sasl.mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        _KAFKA,
    ),
    _s("KAFKA_SASL_USERNAME", "-", "sasl.username (PLAIN, SCRAM)", _KAFKA),
    _s("KAFKA_SASL_PASSWORD", "-", "sasl.password; never logged", _KAFKA, from_file=True),
    _s(
        "KAFKA_SSL_CA_LOCATION",
        "system CAs",
        "ssl.ca.location: PEM file of the brokers' CA (hostnames verified)",
        _KAFKA,
    ),
    _s(
        "KAFKA_SSL_CERTIFICATE_LOCATION",
        "-",
        "ssl.certificate.location: client certificate (mutual TLS)",
        _KAFKA,
    ),
    _s("KAFKA_SSL_KEY_LOCATION", "-", "ssl.key.location: its private key", _KAFKA),
    _s("KAFKA_SSL_KEY_PASSWORD", "-", "ssl.key.password", _KAFKA, from_file=True),
    _s(
        "KAFKA_OAUTH_TOKEN_URL",
        "-",
        "OAUTHBEARER through OIDC (sasl.oauthbearer.method=oidc): token endpoint URL",
        _KAFKA,
    ),
    _s("KAFKA_OAUTH_CLIENT_ID", "-", "sasl.oauthbearer.client.id", _KAFKA),
    _s(
        "KAFKA_OAUTH_CLIENT_SECRET",
        "-",
        "sasl.oauthbearer.client.secret",
        _KAFKA,
        from_file=True,
    ),
    _s("KAFKA_OAUTH_SCOPE", "-", "sasl.oauthbearer.scope", _KAFKA),
    _s("LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR (JSON lines on stderr)"),
)


def names() -> set[str]:
    """Every variable the table documents, ``_FILE`` variants included."""
    return {s.name for s in SETTINGS} | {f"{s.name}_FILE" for s in SETTINGS if s.from_file}


def epilog(command: str | None = None) -> str:
    """The settings ``command`` uses (all of them for None), for its ``--help``."""
    rows = [s for s in SETTINGS if command is None or s.used_by(command)]
    shown = [f"{s.name}(*)" if s.from_file else s.name for s in rows]
    width = max(map(len, shown))
    lines = ["settings (environment or --env-file; *: also NAME_FILE, a file holding the value):"]
    for name, s in zip(shown, rows, strict=True):
        lines.append(f"  {name:<{width}}  {s.meaning} [{s.default}]")
    return "\n".join(lines)


def markdown() -> str:
    """The configuration reference, docs/configuration.md."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from mailbus/kernel/settings_doc.py by `make docs`; do not edit. -->",
        "",
        "Every setting is an environment variable, read once at start-up; `mailbus --env-file"
        " FILE` reads a `.env`-style file first (variables already set win). A setting marked"
        " *file* may instead be given as `NAME_FILE`, the path of a file holding the value (as"
        " Kubernetes mounts Secrets). A bad value exits with status 2 and one line naming the"
        " variable. `mailbus COMMAND --help` lists the settings that command reads. The"
        " enqueue helper (`mailbus_client`) reads `MAILBUS_POLICY_FILE`, `MAILBUS_QUEUE_CAP`"
        " and `MAILBUS_QUEUE_CAP_SHARES` from the environment of the service calling it.",
        "",
        "| variable | default | meaning | read by |",
        "| --- | --- | --- | --- |",
    ]
    for s in SETTINGS:
        name = f"`{s.name}` (*file*)" if s.from_file else f"`{s.name}`"
        readers = ", ".join(f"`{c}`" for c in sorted(s.commands)) or "every command"
        default = "none" if s.default == "-" else _cell(s.default)
        lines.append(f"| {name} | {default} | {_cell(s.meaning)} | {readers} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell (code spans kept as they are)."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


if __name__ == "__main__":
    print(markdown(), end="")


def add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    text: str,
    *,
    description: str | None = None,
    settings_of: str | None = None,
) -> argparse.ArgumentParser:
    """A (sub)command's parser: ``text`` as its help and description, and the settings that
    ``settings_of`` (default: ``name``) reads as its ``--help`` epilog."""
    return commands.add_parser(
        name,
        help=text,
        description=description if description is not None else text,
        epilog=epilog(settings_of or name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
