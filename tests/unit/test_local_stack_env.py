"""stack/local-stack.sh: a second stack's ports come from MAILBUS_STACK_* (`env` starts
nothing, so this runs without a stack)."""

from __future__ import annotations

import os
import subprocess

from services import REPO


def stack_env(**overrides: str) -> str:
    done = subprocess.run(
        ["bash", str(REPO / "stack" / "local-stack.sh"), "env"],
        env={**os.environ, **overrides},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


def test_default_ports() -> None:
    printed = stack_env(MAILBUS_STACK_PG_PORT="", MAILBUS_STACK_KAFKA_PORT="")
    assert "MAILBUS_DATABASE_URL=postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus" in printed
    assert "MAILBUS_KAFKA_BOOTSTRAP=127.0.0.1:9092" in printed


def test_ports_and_directory_are_overridable() -> None:
    printed = stack_env(
        MAILBUS_STACK_PG_PORT="5442",
        MAILBUS_STACK_KAFKA_PORT="9192",
        MAILBUS_STACK_REGISTRY_PORT="8091",
        MAILBUS_STACK_DIR="/tmp/another-stack",
    )
    assert "@127.0.0.1:5442/mailbus" in printed
    assert "MAILBUS_KAFKA_BOOTSTRAP=127.0.0.1:9192" in printed
    assert "127.0.0.1:8091/apis/ccompat/v7" in printed
    assert "--env-file /tmp/another-stack/security.env" in printed
