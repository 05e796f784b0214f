"""The operations runbook (docs/runbook.md) names only `mailbus` commands that exist, as written."""

from __future__ import annotations

import re
import shlex

import pytest
from services import REPO

from mailbus.app.cli import _build_parser
from mailbus.app.exit_codes import UsageError
from mailbus.consumer.dead_letter_views import LetterFilter
from mailbus.kernel.durations import parse_rate

TOPICS = (
    "The provider is down",
    "Replaying dead letters",
    "Pausing a campaign",
    "A campaign paused by the reputation guard",
    "Adding partitions",
    "Rotating the provider API key",
    "The provider refuses our account, sender or quota",
    "Upgrades",
    "Table growth and retention",
    "Kafka is down",
    "Probes",
    "PostgreSQL failover",
    "Rows in unknown",
    "Intake lag or poison",
    "Console sign-ins refused",
    "Alerts",  # generated from ops/alerts.yml, whose commands test_alert_rules.py checks
)


def runbook() -> str:
    text = (REPO / "docs" / "runbook.md").read_text()
    assert text.startswith("# Operations runbook\n")
    return text


def written() -> str:
    """The runbook's written sections, without the alerts generated from ops/alerts.yml."""
    return runbook().split("<!-- alerts: generated", 1)[0]


def commands(section: str) -> list[str]:
    """Every `mailbus ...` in the section: lines of code blocks and inline code spans."""
    found = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL):
        found += [line for line in block.splitlines() if line.startswith("mailbus ")]
    found += [" ".join(span.split()) for span in re.findall(r"`(mailbus [^`]+)`", section)]
    return found


def test_runbook_covers_its_topics() -> None:
    headings = re.findall(r"^## (.+)$", runbook(), re.MULTILINE)
    assert headings == list(TOPICS)
    assert len(commands(written())) >= 15


@pytest.mark.parametrize("command", sorted(set(commands(written()))))
def test_runbook_command_parses(command: str) -> None:
    words = shlex.split(command)
    assert words[0] == "mailbus"
    args = _build_parser().parse_args(words[1:])  # UsageError: an unknown command or option
    if args.command == "dlq" and args.dlq_command in ("list", "replay"):
        LetterFilter.from_options(args.reason, args.priority, args.template, args.since)
        if args.dlq_command == "replay":
            parse_rate(args.rate)


def test_a_wrong_command_would_be_caught() -> None:
    with pytest.raises(UsageError) as refused:
        _build_parser().parse_args(shlex.split("dlq replay --reasons rejected"))
    assert "unrecognized arguments: --reasons" in refused.value.problem
