"""Secrets never printed (issue 34, review 2026-12-06-providers #12): the redaction list
covers every secret setting, and a provider URL may not carry credentials."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mailbus.app.status import shown_url
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.logs import SECRET_ENV, redact
from mailbus.kernel.settings import load_settings

SETTINGS = Path(__file__).resolve().parents[2] / "mailbus" / "kernel" / "settings.py"


def secret_settings() -> set[str]:
    """Every name settings.py reads with ``reader.secret`` (the per-priority keys too)."""
    source = SETTINGS.read_text()
    names = set(re.findall(r'reader\.secret\("(MAILBUS_[A-Z0-9_]+)"\)', source))
    assert 'reader.secret(f"{name}_API_KEY")' in source  # MAILBUS_PROVIDER_P0_API_KEY...
    return names | {f"MAILBUS_PROVIDER_P{n}_API_KEY" for n in range(3)}


def test_the_redaction_list_covers_every_secret_setting() -> None:
    missing = secret_settings() - set(SECRET_ENV) - {"MAILBUS_DATABASE_URL"}
    assert not missing


def test_every_secret_setting_is_masked_in_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    for n, name in enumerate(SECRET_ENV):
        monkeypatch.setenv(name, f"s3cr3t-value-{n:02d}-xyz")
    line = " ".join(f"s3cr3t-value-{n:02d}-xyz" for n in range(len(SECRET_ENV)))
    assert "s3cr3t" not in redact(line)


@pytest.mark.parametrize(
    "name", ["MAILBUS_PROVIDER_URL", "MAILBUS_FALLBACK_PROVIDER_URL", "MAILBUS_PROVIDER_P0_URL"]
)
@pytest.mark.parametrize(
    "url", ["https://api:key-XYZ123456@127.0.0.1:9", "https://key-XYZ123456@127.0.0.1:9"]
)
def test_a_provider_url_with_credentials_is_refused_naming_the_setting(name: str, url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"MAILBUS_DATABASE_URL": "postgresql://localhost/x", name: url})
    assert refused.value.setting == name
    assert "key-XYZ" not in str(refused.value)


def test_a_recorded_url_is_shown_without_credentials() -> None:
    assert shown_url("https://api:key-XYZ@mg.example.com:8443/v3") == (
        "https://***@mg.example.com:8443/v3"
    )
    assert shown_url("https://api.resend.com") == "https://api.resend.com"
    assert shown_url("ses:eu-west-1") == "ses:eu-west-1"
