"""MAILBUS_PROVIDER=ses and postmark: their settings, and bad ones named."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


def test_ses_reads_region_endpoint_and_a_key_pair_from_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    settings = load_settings(
        {
            "MAILBUS_PROVIDER": "ses",
            "MAILBUS_MAIL_FROM": "shop@example.com",
            "MAILBUS_SES_REGION": "eu-west-1",
            "MAILBUS_SES_ENDPOINT_URL": "http://127.0.0.1:5000",
            "MAILBUS_SES_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "MAILBUS_SES_SECRET_ACCESS_KEY_FILE": str(secret),
        }
    )
    assert (settings.provider, settings.ses_region, settings.ses_endpoint_url) == (
        "ses",
        "eu-west-1",
        "http://127.0.0.1:5000",
    )
    assert settings.ses_secret_access_key == "s3cr3t"
    assert "s3cr3t" not in repr(settings)


@pytest.mark.parametrize("provider", ["ses", "postmark"])
def test_a_named_provider_needs_a_sender(provider: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_PROVIDER": provider})
    assert error.value.setting == "MAILBUS_MAIL_FROM"


def test_postmark_defaults_to_its_own_api() -> None:
    settings = load_settings(
        {"MAILBUS_PROVIDER": "postmark", "MAILBUS_MAIL_FROM": "shop@example.com"}
    )
    assert settings.provider_url == "https://api.postmarkapp.com"
