"""Log lines never carry an API key or a full email address, and stay valid JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from mailbus.kernel import logs

API_KEY = "sk_live_4f9a8b7c6d5e"


@pytest.fixture
def emit(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """configure_logging's handler and filter, writing to a buffer; root restored after."""
    monkeypatch.setenv("MAILBUS_PROVIDER_API_KEY", API_KEY)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    buffer = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", buffer)
    logs.configure_logging("DEBUG")
    try:
        yield buffer
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        logs._registered.clear()


def lines(buffer: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("to ana.smith@example.com", "to a***@example.com"),
        ("<Bob+tag@Mail.Example.co.uk>", "<B***@Mail.Example.co.uk>"),
        ("ana%40example.com", "a***%40example.com"),
        ("already a***@example.com", "already a***@example.com"),
        ("Authorization: Bearer abc.DEF-123_x", "Authorization: Bearer ***"),
        ("{'Authorization': 'Basic dXNlcjpwYXNz'}", "{'Authorization': 'Basic ***'}"),
        ("headers Authorization=rawtoken123", "headers Authorization=***"),
        ("sent with bearer eyJhbGciOi.x.y", "sent with bearer ***"),
        ('{"api_key": "abc123"}', '{"api_key": "***"}'),
        ("X-Api-Key: k-123456", "X-Api-Key: ***"),
        ("url?api_key=zzz&x=1", "url?api_key=***&x=1"),
        (
            "postgresql://mailbus:hunter2@db.internal/mailbus",
            "postgresql://mailbus:***@db.internal/mailbus",
        ),
        ("key is sk_live_4f9a8b7c6d5e!", "key is ***!"),
        # Ordinary words are left alone.
        ("template=password_reset priority=p0", "template=password_reset priority=p0"),
        ("Basic auth refused; token bucket empty", "Basic auth refused; token bucket empty"),
        (
            "postgresql://mailbus@127.0.0.1:5432/mailbus",
            "postgresql://mailbus@127.0.0.1:5432/mailbus",
        ),
    ],
)
def test_redact(text: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILBUS_PROVIDER_API_KEY", API_KEY)
    assert logs.redact(text) == expected
    assert logs.redact(expected) == expected  # idempotent


def test_message_arguments_are_masked(emit: io.StringIO) -> None:
    logging.getLogger("mailbus.test").warning(
        'send to %s failed: "%s" (key %s)', "ana.smith@example.com", "Bearer xyz", API_KEY
    )
    [entry] = lines(emit)
    assert entry["msg"] == 'send to a***@example.com failed: "Bearer ***" (key ***)'
    assert entry["level"] == "warning"
    assert entry["logger"] == "mailbus.test"


def test_exception_text_is_masked(emit: io.StringIO) -> None:
    try:
        raise RuntimeError(f"provider refused ana.smith@example.com with key {API_KEY}")
    except RuntimeError:
        logging.getLogger("mailbus.test").exception("call failed for %s", "bo@example.org")
    [entry] = lines(emit)
    assert entry["msg"] == "call failed for b***@example.org"
    assert "RuntimeError: provider refused a***@example.com with key ***" in entry["exc"]
    assert "Traceback" in entry["exc"]
    raw = emit.getvalue()
    assert API_KEY not in raw
    assert "ana.smith@example.com" not in raw


def test_stack_info_is_masked(emit: io.StringIO) -> None:
    # The stack shows the source line of the call, address included.
    logging.getLogger("mailbus.test").info("for carla@example.net", stack_info=True)
    [entry] = lines(emit)
    assert "carla@example.net" not in emit.getvalue()
    assert "c***@example.net" in entry["stack"]


def test_key_from_a_file_and_registered_secrets(
    emit: io.StringIO, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("file-secret-0123456789\n")
    monkeypatch.setenv("MAILBUS_PROVIDER_API_KEY_FILE", str(secret_file))
    logs.register_secret("registered-secret-xyz")
    logs.register_secret("short")  # below 8 characters: not a secret worth a mask
    logging.getLogger("mailbus.test").error(
        "keys file-secret-0123456789 registered-secret-xyz short"
    )
    [entry] = lines(emit)
    assert entry["msg"] == "keys *** *** short"


def test_short_env_key_is_not_masked_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILBUS_PROVIDER_API_KEY", "p0")
    assert logs.redact("priority p0") == "priority p0"


def test_special_characters_keep_the_line_valid_json(emit: io.StringIO) -> None:
    logging.getLogger("mailbus.test").info(
        'quote " backslash \\ newline\n tab\t unicode ü <%s>', "zoë@example.com"
    )
    [entry] = lines(emit)
    assert entry["msg"] == 'quote " backslash \\ newline\n tab\t unicode ü <z***@example.com>'


def test_bad_format_arguments_are_still_masked(emit: io.StringIO) -> None:
    logging.getLogger("mailbus.test").warning("only one %s", "ana@example.com", "extra")
    [entry] = lines(emit)
    assert "ana@example.com" not in emit.getvalue()
    assert "a***@example.com" in entry["msg"]


def test_long_lines_are_redacted_in_linear_time() -> None:
    import time

    started = time.monotonic()
    for text in ("a." * 50_000 + "@b", "x-" * 50_000 + "=", "a" * 100_000 + "://x"):
        logs.redact(text)
    assert time.monotonic() - started < 2.0


def test_extra_fields_are_kept_as_json_fields(emit: io.StringIO) -> None:
    logging.getLogger("mailbus.test").info(
        "claimed",
        extra={
            "send_id": 42,
            "priority": "p0",
            "took_s": 0.25,
            "ok": True,
            "none": None,
            "keys": ["a", "b"],
            "counts": {"accepted": 3},
        },
    )
    [entry] = lines(emit)
    assert entry["msg"] == "claimed"
    assert entry["send_id"] == 42 and entry["took_s"] == 0.25 and entry["ok"] is True
    assert entry["priority"] == "p0" and entry["none"] is None
    assert entry["keys"] == ["a", "b"] and entry["counts"] == {"accepted": 3}


def test_extra_fields_are_masked(emit: io.StringIO) -> None:
    logging.getLogger("mailbus.test").warning(
        "refused",
        extra={
            "to": "ana.smith@example.com",
            "api_key": "short",  # named like a secret: masked whole, whatever its length
            "headers": {"Authorization": "Bearer abc.def", "X-Trace": "t-1"},
            "recipients": ["bo@example.org", f"key {API_KEY}"],
            "url": "postgresql://mailbus:hunter2@db/mailbus",
            "error": RuntimeError(f"rejected carla@example.net with {API_KEY}"),
        },
    )
    raw = emit.getvalue()
    [entry] = lines(emit)
    assert entry["to"] == "a***@example.com"
    assert entry["api_key"] == "***"
    assert entry["headers"] == {"Authorization": "***", "X-Trace": "t-1"}
    assert entry["recipients"] == ["b***@example.org", "key ***"]
    assert entry["url"] == "postgresql://mailbus:***@db/mailbus"
    assert entry["error"] == "rejected c***@example.net with ***"
    for secret in (API_KEY, "hunter2", "abc.def", "ana.smith", "carla@", "short"):
        assert secret not in raw


def test_extra_fields_do_not_replace_the_core_fields(emit: io.StringIO) -> None:
    logging.getLogger("mailbus.test").info("hello", extra={"level": "fake", "ts": 1})
    [entry] = lines(emit)
    assert entry["level"] == "info" and entry["level_"] == "fake"
    assert entry["ts"] != 1 and entry["ts_"] == 1


def test_unsubscribe_secrets_are_masked_from_the_environment_and_their_files(
    emit: io.StringIO, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    previous = tmp_path / "previous"
    previous.write_text("unsub-previous-0123456789\n")
    monkeypatch.setenv("MAILBUS_UNSUBSCRIBE_SECRET", "unsub-current-0123456789")
    monkeypatch.setenv("MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS_FILE", str(previous))
    logging.getLogger("mailbus.test").error(
        "secrets unsub-current-0123456789 unsub-previous-0123456789"
    )
    [entry] = lines(emit)
    assert entry["msg"] == "secrets *** ***"
