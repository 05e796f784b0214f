"""`mailbus suppress add | remove | list | import` against the test's own database,
run as the `mailbus` command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
from ledger_support import suppressed_at_load
from services import run_mailbus


def env_for(database_url: str) -> dict[str, str]:
    return dict(os.environ, MAILBUS_DATABASE_URL=database_url, MAILBUS_LOG_LEVEL="WARNING")


def entries(database_url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT address, reason, source FROM email_suppressions ORDER BY address"
        ).fetchall()


def test_add_remove_and_list(database_url: str) -> None:
    env = env_for(database_url)
    added = run_mailbus("suppress", "add", "Ana@Example.com", "--reason", "asked", env=env)
    assert added.returncode == 0, added.stderr
    assert "ana@example.com: suppressed" in added.stdout
    again = run_mailbus("suppress", "add", "ANA@example.COM", "--reason", "twice", env=env)
    assert again.returncode == 0 and "already suppressed" in again.stdout
    bo = run_mailbus("suppress", "add", "bo@example.org", env=env)
    assert bo.returncode == 0 and "(reason: manual; stops all mail)" in bo.stdout
    cy = run_mailbus("suppress", "add", "cy@example.net", "--reason", "unsubscribed", env=env)
    assert cy.returncode == 0 and "(reason: unsubscribed; stops bulk mail only)" in cy.stdout
    assert entries(database_url) == [
        ("ana@example.com", "twice", "cli"),
        ("bo@example.org", "manual", "cli"),
        ("cy@example.net", "unsubscribed", "cli"),
    ]

    listed = run_mailbus("suppress", "list", env=env)
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split("\t") == ["address", "reason", "source", "created_at", "scope"]
    assert [line.split("\t")[:3] + line.split("\t")[4:] for line in lines[1:]] == [
        ["ana@example.com", "twice", "cli", "all"],
        ["bo@example.org", "manual", "cli", "all"],
        ["cy@example.net", "unsubscribed", "cli", "bulk"],
    ]
    as_json = json.loads(run_mailbus("suppress", "list", "--json", env=env).stdout)
    assert [(e["address"], e["reason"], e["source"], e["scope"]) for e in as_json] == [
        ("ana@example.com", "twice", "cli", "all"),
        ("bo@example.org", "manual", "cli", "all"),
        ("cy@example.net", "unsubscribed", "cli", "bulk"),
    ]
    assert all(e["created_at"] for e in as_json)

    removed = run_mailbus("suppress", "remove", "ANA@EXAMPLE.COM", env=env)
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert entries(database_url) == [
        ("bo@example.org", "manual", "cli"),
        ("cy@example.net", "unsubscribed", "cli"),
    ]
    absent = run_mailbus("suppress", "remove", "ana@example.com", env=env)
    assert absent.returncode == 0 and "was not suppressed" in absent.stdout
    assert json.loads(run_mailbus("suppress", "list", "--json", env=env).stdout)[0]["address"] == (
        "bo@example.org"
    )


def test_an_invalid_address_is_refused_and_nothing_is_written(database_url: str) -> None:
    result = run_mailbus("suppress", "add", "not an address", env=env_for(database_url))
    assert result.returncode == 2
    assert "ADDRESS" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert entries(database_url) == []


def test_import_skips_bad_lines_with_their_numbers(database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url)
    assert run_mailbus("suppress", "add", "already@example.com", env=env).returncode == 0
    audience = tmp_path / "suppressions.csv"
    audience.write_text(
        "email,reason\n"
        "One@Example.com,bounced\n"
        "not-an-email,x\n"
        "two@example.com,\n"
        "\n"
        "ALREADY@example.com,dup\n"
        "one@example.com,dup-in-file\n"
        "three@example\n"
    )
    result = run_mailbus("suppress", "import", str(audience), "--reason", "legacy", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "line 3: 'not-an-email' is not a valid email address; skipped",
        "line 8: 'three@example' is not a valid email address; skipped",
    ]
    assert result.stdout.strip().endswith(
        "6 addresses read, 2 added, 2 already suppressed, 2 invalid (skipped)"
    )
    assert entries(database_url) == [
        ("already@example.com", "manual", "cli"),
        ("one@example.com", "bounced", "import"),
        ("two@example.com", "legacy", "import"),
    ]
    # Running it again adds nothing.
    again = run_mailbus("suppress", "import", str(audience), env=env)
    assert "0 added, 4 already suppressed" in again.stdout
    # What was imported suppresses the consumer's load of a mail in any case.
    with psycopg.connect(database_url) as conn:
        send = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('k', 'TWO@Example.COM', 't') RETURNING id"
        ).fetchone()
        assert send is not None
    assert suppressed_at_load(database_url, [send[0]]) == {send[0]: True}


def test_import_in_batches_streams_a_large_file(database_url: str, tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    with big.open("w") as out:
        out.write("email\n")
        for n in range(12_345):
            out.write(f"User{n}@Example.net\n" if n != 7_000 else "broken\n")
    result = run_mailbus("suppress", "import", str(big), env=env_for(database_url))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "line 7002: 'broken' is not a valid email address; skipped"
    ]
    assert "12345 addresses read, 12344 added" in result.stdout
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE address = lower(address))"
            " FROM email_suppressions"
        ).fetchone() == (12_344, 12_344)


def test_import_refuses_a_missing_file_or_header(database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url)
    missing = run_mailbus("suppress", "import", str(tmp_path / "nope.csv"), env=env)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    headless = tmp_path / "headless.csv"
    headless.write_text("ana@example.com\nbo@example.com\n")
    result = run_mailbus("suppress", "import", str(headless), env=env)
    assert result.returncode == 2 and "'email' column" in result.stderr
    assert entries(database_url) == []


def test_add_remove_and_import_say_what_they_did_as_json(database_url: str, tmp_path: Path) -> None:
    """docs/reference/cli.md#json-documents: each change as one document on stdout, the
    invalid lines of an import in it (not on stderr); a missing file as the JSON error."""
    env, ana = env_for(database_url), "ana@example.com"
    added = run_mailbus("suppress", "add", "Ana@Example.com", "--reason", "unsubscribed",
                        "--json", env=env)  # fmt: skip
    assert (added.returncode, added.stderr) == (0, ""), added.stderr
    assert json.loads(added.stdout) == {
        "address": "ana@example.com", "added": True, "reason": "unsubscribed", "scope": "bulk",
    }  # fmt: skip
    audience = tmp_path / "suppressions.csv"
    audience.write_text("email\nbo@example.com\nnot-an-email\nana@example.com\n")
    imported = run_mailbus("suppress", "import", str(audience), "--json", env=env)
    assert (imported.returncode, imported.stderr) == (0, ""), imported.stderr
    assert json.loads(imported.stdout) == {
        "file": str(audience), "read": 3, "added": 1, "already": 1, "invalid": 1,
        "invalid_lines": [
            {"line": 3, "text": "not-an-email", "problem": "is not a valid email address"}
        ],
    }  # fmt: skip
    removed = run_mailbus("suppress", "remove", "ANA@example.com", "--json", env=env)
    assert json.loads(removed.stdout) == {"address": "ana@example.com", "removed": [ana]}
    again = run_mailbus("suppress", "remove", ana, "--json", env=env)
    assert json.loads(again.stdout) == {"address": ana, "removed": []}

    missing = run_mailbus("suppress", "import", str(tmp_path / "nope.csv"), "--json", env=env)
    assert (missing.returncode, missing.stdout) == (2, "")
    error = json.loads(missing.stderr)["error"]
    assert (error["kind"], error["exit"]) == ("configuration", 2)
    assert "no such file" in error["message"]
    assert entries(database_url) == [("bo@example.com", "manual", "import")]
