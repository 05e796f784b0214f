"""Every code example in README.md and docs/ is run or checked, so none can rot unseen.

Fenced blocks, each one test named ``path:line``:
- ``python``: executed against a scratch database (``url`` names it, and the local stack's
  URL written in a block is pointed at it); ``<!-- context: NAME -->`` before the fence
  gives it the names a fragment assumes (see CONTEXTS).
- ``sh``/``bash``/``shell``: each command line checked by its kind: `mailbus ...` parsed by
  the real parser, and run against the scratch database when it only reads; `make TARGET`
  a target of the Makefile; `pip install` the local paths, constraints and extras it names.
  Anything else needs a marker.
- ``console``: each ``$ mailbus ...`` run; what it prints must be the lines shown below it.
- ``<!-- synopsis -->`` before a fence: a command summary with ``[...]`` and ``a|b``; each
  subcommand and ``--option`` it names must exist.
- ``<!-- not-run: reason -->`` before a fence: not run, and no test of its own (a skip would
  count as a pass); one test holds that each such marker gives its reason.
"""

from __future__ import annotations

import argparse
import io
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import psycopg
import pytest
from services import REPO, settings_env

from mailbus.app.cli import _build_parser, main
from mailbus.app.exit_codes import UsageError
from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*(not-run|context|synopsis)\s*(?::\s*(.*?))?\s*-->\s*$")
SHELLS = ("sh", "bash", "shell")
LOCAL_STACK_URL = "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
# What a `mailbus` line may run against the scratch database: it only reads.
READS = {("status",), ("dlq", "list"), ("dlq", "show"), ("send", "show"), ("suppress", "list"),
         ("campaign", "list"), ("campaign", "status")}  # fmt: skip
READS_WITH = {("migrate",): "--status", ("retention", "run"): "--dry-run",
              ("dlq", "replay"): "--dry-run"}  # fmt: skip


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int
    lang: str
    body: str
    marker: str | None
    argument: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def snippets() -> Iterator[Snippet]:
    for path in DOCS:
        text = path.read_text()
        for fence in FENCE.finditer(text):
            lang = fence.group(1)
            if lang not in ("python", "console", *SHELLS):
                continue
            before = [line for line in text[: fence.start()].splitlines() if line.strip()]
            marker = MARKER.search(before[-1]) if before else None
            yield Snippet(
                path,
                text[: fence.start()].count("\n") + 1,
                lang,
                fence.group(2),
                marker.group(1) if marker else None,
                (marker.group(2) or "") if marker else "",
            )


ALL = list(snippets())


# --- the names a fragment assumes (<!-- context: NAME -->) --------------------------------


def _orders(url: str) -> dict[str, Any]:
    """The business table the client examples update in the same transaction."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, state text NOT NULL)")
        conn.execute("INSERT INTO orders VALUES (1042, 'paid')")
    return {}


def _webhook(_url: str) -> dict[str, Any]:
    return {"secret": "a-webhook-secret", "body": b'{"type": "delivered"}'}


def _outcome_event(_url: str) -> dict[str, Any]:
    """A consumer loop's names: a record from `{prefix}.send.events`, what it has seen."""
    from mailbus.schemas.codec import send_event_codec

    value = send_event_codec().encode(
        {"event_id": 7, "send_id": 3, "dedupe_key": "invoice-88", "template": "invoice",
         "event": "delivered", "status": "accepted", "delivery_status": "delivered",
         "message_id": "msg-1", "error": None, "occurred_at": 1_700_000_000_000_000}
    )  # fmt: skip

    class Message:
        def value(self) -> bytes:
            return value

    shown: list[tuple[str, str]] = []
    return {"message": Message(), "seen": set(), "show": lambda *a: shown.append(a)}


CONTEXTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "orders": _orders,
    "webhook": _webhook,
    "outcome-event": _outcome_event,
}


# --- shell lines ---------------------------------------------------------------------------


def _command_lines(body: str) -> Iterator[list[str]]:
    """Each command of a shell block as words: continuations joined, comments and what
    follows a redirection or a pipe dropped, leading VAR=value kept."""
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for stop in (">", ">>", "<", "|", "&&", ";"):
            if stop in words:
                words = words[: words.index(stop)]
        if words:
            yield words


@cache
def parser() -> argparse.ArgumentParser:
    return _build_parser()


class Scratch:
    """A scratch database and topic prefix, made on first use (a block that is only
    parsed needs none), and the environment that points `mailbus` at them."""

    def __init__(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        self._request, self._monkeypatch = request, monkeypatch

    @cached_property
    def settings(self) -> Settings:
        settings: Settings = self._request.getfixturevalue("settings")
        for name, value in settings_env(settings).items():
            if name.startswith("MAILBUS_"):
                self._monkeypatch.setenv(name, value)
        return settings


def _mailbus(words: list[str], scratch: Scratch) -> None:
    assignments = [w for w in words[: words.index("mailbus")] if "=" in w]
    argv = words[words.index("mailbus") + 1 :]
    try:
        with redirect_stdout(io.StringIO()):
            args = parser().parse_args(argv)
    except UsageError as exc:
        pytest.fail(f"`mailbus {shlex.join(argv)}`: {exc}")
    except SystemExit as done:  # --version, --help: printed and ended
        assert done.code == 0, f"`mailbus {shlex.join(argv)}` exit {done.code}"
        return
    path = tuple(w for w in argv if not w.startswith("-"))[: 2 if args.command != "status" else 1]
    reads = path in READS or READS_WITH.get(path, "\0") in argv
    if assignments or not reads:
        return  # parsed; it writes, waits, or needs a setting of its own: not run
    assert scratch.settings  # the environment points at the scratch database
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    assert code in (0, 3), f"`mailbus {shlex.join(argv)}` exit {code}: {err.getvalue()}"


def _make(targets: list[str]) -> None:
    makefile = (REPO / "Makefile").read_text()
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), f"make {target}"


def _pip_install(words: list[str]) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = set(project.get("optional-dependencies", {}))
    for before, word in zip(["", *words], words, strict=False):
        if before == "-c" or word.startswith((".", "/")):
            local, _, wanted = word.partition("[")
            assert (REPO / local).exists(), f"pip install: no {local}"
            for extra in filter(None, wanted.rstrip("]").split(",")):
                assert local != "." or extra in extras, f"pip install: no extra [{extra}]"


def _shell(snippet: Snippet, scratch: Scratch) -> None:
    for words in _command_lines(snippet.body):
        program = next(w for w in words if "=" not in w or w.startswith("-"))
        if program == "mailbus":
            _mailbus(words, scratch)
        elif program == "make":
            _make([w for w in words[1:] if not w.startswith("-")])
        elif words[:2] == ["pip", "install"]:
            _pip_install(words[2:])
        else:
            pytest.fail(f"{shlex.join(words)}: not a command this runner checks; run it here or"
                        " mark the block <!-- not-run: reason -->")  # fmt: skip


def _synopsis(snippet: Snippet) -> None:
    """``mailbus campaign start|pause ID [--rate N/min]``: the subcommands and options."""
    for line in snippet.body.replace("\\\n", " ").splitlines():
        words = line.split("#")[0].split()
        if not words or words[0] != "mailbus":
            continue
        parsers = [parser()]
        for word in words[1:]:
            subs = [_subcommands(p) for p in parsers]
            if word.startswith(("-", "[", '"')) or not all(subs):
                break
            parsers = [s[name] for s in subs for name in word.split("|") if name in s]
            assert len(parsers) == len(word.split("|")) * len(subs), f"{line}: {word}"
        options = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line)
        for command in parsers:
            known = {o for action in command._actions for o in action.option_strings}
            assert set(options) <= known, f"{line}: {sorted(set(options) - known)}"


def _subcommands(command: Any) -> dict[str, Any]:
    for action in command._actions:
        if action.choices and action.dest != "help" and isinstance(action.choices, dict):
            return dict(action.choices)
    return {}


def _console(snippet: Snippet, scratch: Scratch) -> None:
    assert scratch.settings  # the environment points at the scratch database
    for command in re.split(r"^\$ ", snippet.body, flags=re.MULTILINE)[1:]:
        line, *shown = command.splitlines()
        words = shlex.split(line)
        assert words[0] == "mailbus", line
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            main(words[1:])
        assert (out.getvalue() + err.getvalue()).splitlines() == shown, line


RUN = [s for s in ALL if s.marker != "not-run"]


@pytest.mark.parametrize("snippet", RUN, ids=[s.name for s in RUN])
def test_doc_snippet(
    snippet: Snippet, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = Scratch(request, monkeypatch)
    if snippet.marker == "synopsis":
        _synopsis(snippet)
    elif snippet.lang == "python":
        url = scratch.settings.database_url
        names: dict[str, Any] = {"__name__": "__snippet__", "url": url}
        if snippet.marker == "context":
            for context in snippet.argument.split(","):
                names.update(CONTEXTS[context.strip()](url))
        code = compile(snippet.body.replace(LOCAL_STACK_URL, url), snippet.name, "exec")
        with redirect_stdout(io.StringIO()):
            exec(code, names)  # the documentation's own example
    elif snippet.lang == "console":
        _console(snippet, scratch)
    else:
        _shell(snippet, scratch)


def test_each_example_not_run_says_why() -> None:
    unexplained = [s.name for s in ALL if s.marker == "not-run" and not s.argument]
    assert not unexplained, "<!-- not-run: ... --> needs a reason"


def test_the_runner_finds_the_examples() -> None:
    """A broken fence pattern would collect nothing and pass: the docs hold dozens."""
    assert sum(s.lang == "python" for s in ALL) >= 5
    assert sum(s.lang in SHELLS for s in ALL) >= 25
    assert all(s.marker is None or s.marker in ("not-run", "context", "synopsis") for s in ALL)
