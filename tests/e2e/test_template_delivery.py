"""Templates through relay and consumer processes to Postmark's sandbox dialect, with the
fault mix (docs/providers.md#templates): a mapped template goes by reference
(``/email/withTemplate``), an unmapped one is rendered from MAILBUS_TEMPLATES_DIR, a mail
missing a variable is ``failed`` with a dead letter naming it and never reaches the
provider; the table agrees with the provider."""

from __future__ import annotations

from pathlib import Path

from e2e_stack import Stack

POSTMARK = {"MAILBUS_PROVIDER": "postmark", "MAILBUS_MAIL_FROM": "shop@example.com"}


def test_templates_through_faults_end_with_the_table_agreeing(stack: Stack, tmp_path: Path) -> None:
    folder = tmp_path / "password_reset"
    folder.mkdir()
    (folder / "subject.txt").write_text("Reset your password, {{ name }}")
    (folder / "text.txt").write_text("Hello {{ name }}")
    stack.set_faults(
        {"kind": "hang_after_accept", "share": 0.15, "hang_seconds": 3},
        {"kind": "503", "share": 0.1},
        {"kind": "429", "share": 0.1, "retry_after": 1},
        {"kind": "malformed", "share": 0.1},
    )
    mapped = stack.seed(
        12, prefix="order", template="order_confirmation", payload_json='{"order_id": "7"}'
    )
    local = stack.seed(6, prefix="reset", template="password_reset", payload_json='{"name": "A"}')
    broken = stack.seed(2, prefix="broken", template="password_reset", payload_json="{}")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url,
        MAILBUS_REQUEST_TIMEOUT="1",
        MAILBUS_PROVIDER_TEMPLATES="order_confirmation=order-v2",
        MAILBUS_TEMPLATES_DIR=str(tmp_path),
        **POSTMARK,
    )
    statuses = stack.wait_settled(60)
    assert statuses == {"accepted": len(mapped) + len(local), "failed": len(broken)}
    keys = stack.ledger()["keys"]
    for key in mapped:
        assert (keys[key]["provider_template"], keys[key]["template_data"]) == (
            "order-v2",
            {"order_id": "7"},
        )
    for key in local:
        assert "provider_template" not in keys[key]  # sent as content, not by reference
        assert keys[key]["template"] == "Reset your password, A"  # the rendered subject
    assert not set(broken) & set(keys)  # never reached the provider
    letters = stack.query(
        "SELECT dedupe_key, reason, error, attempts FROM email_dead_letters ORDER BY dedupe_key"
    )
    assert [(k, r, a) for k, r, _, a in letters] == [(k, "invalid", 0) for k in sorted(broken)]
    assert all("template_variable_missing: password_reset.name" in e for _, _, e, _ in letters)
    assert stack.accepted_twice() == []
    stack.assert_table_agrees_with_providers()
