"""The receiver's settings (listen address, secret or its file) and its counters."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from mailbus.kernel import metrics
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


def test_defaults() -> None:
    settings = load_settings({})
    assert settings.webhook_listen == ("127.0.0.1", 8026)
    assert settings.webhook_secret == ""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0.0.0.0:9000", ("0.0.0.0", 9000)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:8026", ("::1", 8026)),
    ],
)
def test_listen(raw: str, expected: tuple[str, int]) -> None:
    assert load_settings({"MAILBUS_WEBHOOK_LISTEN": raw}).webhook_listen == expected


@pytest.mark.parametrize("raw", ["8026", ":8026", "host:", "host:port", "host:70000"])
def test_a_bad_listen_address_names_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"MAILBUS_WEBHOOK_LISTEN": raw})
    assert caught.value.setting == "MAILBUS_WEBHOOK_LISTEN"


def test_the_secret_from_the_environment_or_its_file(tmp_path: Path) -> None:
    assert load_settings({"MAILBUS_WEBHOOK_SECRET": " s3cret-value "}).webhook_secret == (
        "s3cret-value"
    )
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-the-file\n")
    env = {"MAILBUS_WEBHOOK_SECRET": "ignored", "MAILBUS_WEBHOOK_SECRET_FILE": str(secret_file)}
    assert load_settings(env).webhook_secret == "from-the-file"
    with pytest.raises(ConfigError) as caught:
        load_settings({"MAILBUS_WEBHOOK_SECRET_FILE": str(tmp_path / "missing")})
    assert caught.value.setting == "MAILBUS_WEBHOOK_SECRET_FILE"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_counters_by_type_bounce_and_complaint() -> None:
    names = {
        "events": ("mailbus_webhook_events_total", {"type": "bounced", "result": "stored"}),
        "dups": ("mailbus_webhook_events_total", {"type": "bounced", "result": "duplicate"}),
        "hard": ("mailbus_webhook_bounces_total", {"kind": "hard"}),
        "soft": ("mailbus_webhook_bounces_total", {"kind": "soft"}),
        "complaints": ("mailbus_webhook_complaints_total", {}),
        "suppressions": ("mailbus_webhook_suppressions_total", {}),
        "stale": ("mailbus_webhook_rejected_total", {"reason": "stale"}),
    }
    before = {key: sample(name, **labels) for key, (name, labels) in names.items()}
    metrics.observe_webhook_event("bounced", "hard", "stored", 1)
    metrics.observe_webhook_event("bounced", "soft", "stored", 0)
    metrics.observe_webhook_event("bounced", "hard", "duplicate", 0)  # counted once only
    metrics.observe_webhook_event("complained", None, "unmatched", 0)
    metrics.observe_webhook_rejected("stale")
    after = {key: sample(name, **labels) for key, (name, labels) in names.items()}
    assert {key: after[key] - before[key] for key in names} == {
        "events": 2,
        "dups": 1,
        "hard": 1,
        "soft": 1,
        "complaints": 1,
        "suppressions": 1,
        "stale": 1,
    }
