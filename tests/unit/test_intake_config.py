"""The intake's settings: defaults, and a bad value names its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbus.intake.config import IntakeConfig
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


def test_defaults() -> None:
    settings = load_settings({"MAILBUS_TOPIC_PREFIX": "shop"})
    config = IntakeConfig.from_environ(settings, {"MAILBUS_STATE_DIR": "/var/lib/mailbus"})
    assert (config.topic, config.dlq_topic, config.group) == (
        "orders.events",
        "shop.intake.dlq",
        "shop-intake",
    )
    assert (config.batch_size, config.batch_wait, config.session_timeout) == (1000, 0.2, 30.0)
    assert config.mappings_path is None and config.web_port is None
    assert config.state_dir == Path("/var/lib/mailbus")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAILBUS_INTAKE_TOPIC", "orders events"),
        ("MAILBUS_INTAKE_GROUP", "a/b"),
        ("MAILBUS_INTAKE_BATCH", "0"),
        ("MAILBUS_INTAKE_BATCH", "many"),
        ("MAILBUS_INTAKE_BATCH_WAIT", "-1"),
        ("MAILBUS_INTAKE_SESSION_TIMEOUT", "1"),
        ("MAILBUS_INTAKE_WEB_PORT", "70000"),
        ("MAILBUS_INTAKE_MAPPINGS", "/no/such/mappings.json"),
    ],
)
def test_a_bad_value_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        IntakeConfig.from_environ(load_settings({}), {name: value})
    assert raised.value.setting == name
