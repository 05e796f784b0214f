"""The pure parts of `mailbus retention run` (docs/retention.md): when a run goes on, which
window each table has, and which replay horizons a window must outlast."""

from __future__ import annotations

import pytest

from mailbus.app.retention_horizons import replay_horizons
from mailbus.consumer.retention import (
    TABLES,
    Windows,
    keep_going,
    refuse_other_floors,
    refuse_short_window,
)
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings

DAY = 86400.0
URL = {"MAILBUS_DATABASE_URL": "postgresql://u@h/d"}


def test_a_full_batch_goes_on_until_the_budget_is_spent() -> None:
    assert keep_going(deleted=10, batch=10, now=5.0, deadline=6.0) is True
    assert keep_going(deleted=10, batch=10, now=6.0, deadline=6.0) is None  # spent, more left
    assert keep_going(deleted=9, batch=10, now=60.0, deadline=6.0) is False  # done, even late


def test_each_table_has_its_window_and_recipients_never_outlive_their_campaign() -> None:
    windows = Windows(mail=90 * DAY, recipients=30 * DAY, campaigns=365 * DAY, audit=400 * DAY)
    got = {table: windows.of_table(table) / DAY for table, _ in TABLES}
    assert got == {
        "sends": 90, "dead letters": 90, "delivery events": 90,
        "campaign recipients": 30, "campaigns": 365, "console audit": 400,
    }
    assert Windows(90 * DAY, 30 * DAY, 10 * DAY, DAY).of_table("campaign recipients") == 10 * DAY


def test_the_windows_come_from_their_settings_and_are_at_least_a_day() -> None:
    settings = load_settings({**URL, "MAILBUS_RETENTION_AUDIT": "2d"})
    assert Windows.of(settings) == Windows(90 * DAY, 30 * DAY, 365 * DAY, 2 * DAY)
    for name in ("MAILBUS_RETENTION_RECIPIENTS", "MAILBUS_RETENTION_CAMPAIGNS",
                 "MAILBUS_RETENTION_AUDIT"):
        with pytest.raises(ConfigError, match=name):
            load_settings({**URL, name: "12h"})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MAILBUS_RETENTION": "2d"}, "MAILBUS_INTAKE_MAX_AGE"),  # intake's default is 3d
        ({"MAILBUS_RETENTION": "1d", "MAILBUS_INTAKE_MAX_AGE": "1h",
          "MAILBUS_IDEMPOTENCY_WINDOW": "90000"}, "MAILBUS_IDEMPOTENCY_WINDOW"),
        ({"MAILBUS_RETENTION": "1d", "MAILBUS_INTAKE_MAX_AGE": "1h",
          "MAILBUS_LOOKUP_SETTLE": "90000"}, "MAILBUS_LOOKUP_SETTLE"),
    ],
)
def test_a_window_shorter_than_a_replay_horizon_is_refused(env: dict[str, str], named: str) -> None:
    env = {**URL, **env}
    settings = load_settings(env)
    with pytest.raises(ConfigError, match=named):
        refuse_short_window(settings.retention, replay_horizons(settings, env))


def test_resend_key_window_is_a_horizon_and_the_defaults_pass() -> None:
    env = {**URL, "MAILBUS_PROVIDER": "resend", "MAILBUS_MAIL_FROM": "a@x.org"}
    settings = load_settings(env)
    assert ("MAILBUS_IDEMPOTENCY_WINDOW", DAY) in replay_horizons(settings, env)
    refuse_short_window(settings.retention, replay_horizons(settings, env))  # 90d: fine


def test_a_run_keeps_to_the_databases_floors_and_names_the_setting_that_differs() -> None:
    defaults = Windows.of(load_settings(URL))
    floors = {table: defaults.of_table(table) for table, _ in TABLES}
    refuse_other_floors(defaults, floors)  # windows equal to their floors: a run goes on
    for setting, window, table in (
        ("MAILBUS_RETENTION", "30d", "sends"),  # shorter: the database would refuse it
        ("MAILBUS_RETENTION_AUDIT", "400d", "console audit"),  # longer: never caught up
        ("MAILBUS_RETENTION_RECIPIENTS", "7d", "campaign recipients"),
    ):
        windows = Windows.of(load_settings({**URL, setting: window}))
        with pytest.raises(ConfigError) as refused:
            refuse_other_floors(windows, floors)
        assert refused.value.setting == setting
        assert f"floor for {table} is" in str(refused.value)
        assert "retention floors --set" in str(refused.value)
