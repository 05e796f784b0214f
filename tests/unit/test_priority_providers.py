"""MAILBUS_PROVIDER_P0_URL (P1, P2): a priority's own provider, one provider per process."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from mailbus.consumer.provider import HttpProvider, OutgoingMail
from mailbus.consumer.runner import _process_provider
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings
from mailbus.providers.registry import senders

P0 = {
    "MAILBUS_PROVIDER_P0_URL": "https://transactional.example",
    "MAILBUS_PROVIDER_P0_API_KEY": "k0",
}


def test_a_priority_provider_is_parsed_with_its_key() -> None:
    settings = load_settings(P0)
    assert settings.provider_for("p0") == ("p0", "https://transactional.example", "k0", None)
    assert settings.provider_for("p1") is None
    assert "k0" not in repr(settings)


def test_a_key_without_a_url_names_the_url() -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_PROVIDER_P2_API_KEY": "k2"})
    assert "MAILBUS_PROVIDER_P2_URL" in str(error.value)


def test_a_p0_process_calls_the_p0_provider_under_the_name_p0() -> None:
    name, provider, url = _process_provider(load_settings(P0), ["p0"], senders())
    assert (name, url) == ("p0", "https://transactional.example")
    assert isinstance(provider, HttpProvider)


def test_other_priorities_keep_the_default_provider() -> None:
    name, _provider, url = _process_provider(load_settings(P0), ["p1", "p2"], senders())
    assert (name, url) == (None, "http://127.0.0.1:8025")


def test_a_process_never_mixes_two_providers() -> None:
    with pytest.raises(ConfigError) as error:
        _process_provider(load_settings(P0), ["p0", "p1"], senders())
    assert "MAILBUS_PROVIDER_P0_URL" in str(error.value)


def test_a_priority_providers_key_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    """MAILBUS_PROVIDER_P0_API_KEY_FILE rotates like MAILBUS_PROVIDER_API_KEY_FILE: the
    next mail is encoded under the new key, without a restart (docs/runbook.md)."""
    path = tmp_path / "p0-key"
    path.write_text("p0-old-key\n")
    env = {"MAILBUS_PROVIDER_P0_URL": P0["MAILBUS_PROVIDER_P0_URL"]}
    settings = load_settings({**env, "MAILBUS_PROVIDER_P0_API_KEY_FILE": str(path)})
    _name, provider, _url = _process_provider(settings, ["p0"], senders())
    mail = OutgoingMail("order-7", "ana@example.com", "order", {})

    def sent_key() -> str:
        return str(provider.prepare(mail).call.headers["Authorization"])

    assert sent_key() == "Bearer p0-old-key"
    fresh = tmp_path / "p0-key.new"
    fresh.write_text("p0-new-key\n")
    os.replace(fresh, path)  # as a secret mount swaps a file
    time.sleep(1.1)  # the file is looked at once a second at most
    assert sent_key() == "Bearer p0-new-key"
    asyncio.run(provider.aclose())
