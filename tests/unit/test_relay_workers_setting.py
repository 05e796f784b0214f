"""MAILBUS_RELAY_WORKERS: the pointer lane's workers in one relay process."""

from __future__ import annotations

import pytest

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


def test_two_workers_by_default_and_any_from_1_to_16() -> None:
    assert load_settings({}).relay_workers == 2
    assert load_settings({"MAILBUS_RELAY_WORKERS": "1"}).relay_workers == 1
    assert load_settings({"MAILBUS_RELAY_WORKERS": "16"}).relay_workers == 16


@pytest.mark.parametrize("raw", ["0", "17", "two"])
def test_a_bad_count_names_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"MAILBUS_RELAY_WORKERS": raw})
    assert "MAILBUS_RELAY_WORKERS" in str(caught.value)
