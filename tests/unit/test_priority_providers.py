"""MAILBUS_PROVIDER_P0_URL (P1, P2): a priority's own provider, one provider per process."""

from __future__ import annotations

import pytest

from mailbus.consumer.provider import HttpProvider
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
    assert settings.provider_for("p0") == ("p0", "https://transactional.example", "k0")
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
