"""Console benchmark: each page's server time over a large ``email_sends``, and the upload
rate of a large CSV through the console against ``mailbus campaign create``'s.

    flock /tmp/mailbus-heavy.lock python3 bench/console_pages.py \
        [--rows 10000000] [--requests 40] [--runs 3] [--upload-lines 1000000] [--doc PATH]

One scratch database (migrated, dropped at the end) is filled once with ``--rows`` settled
sends (``INSERT … SELECT generate_series``: 70% p2 campaign mail over 20 finished campaigns
and one running, each campaign's mail written together; 25% p1, 5% p0; 95% accepted, 2%
failed, 2% suppressed, 1% expired; one attempt each; the failed ones dead letters, 1,000
not replayed; 1,000,000 addresses suppressed) plus 3,000 open rows, then VACUUM ANALYZE.
`mailbus console` serves it as a member of mailbus_operator (its least-privilege role),
the user named by a trusted proxy header.
Each run asks every page ``--requests`` times over one kept-alive connection, each time
for another mail, address or letter, and takes p50/p95 of the time to the last byte; then
uploads the CSV once through ``/campaigns/new`` and gives it once to ``mailbus campaign
create`` (``--upload-lines 0`` skips both). Three runs; min / median / max written to
``--doc`` (docs/benchmarks/console.md) with the EXPLAIN of the queries behind each page.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from harness import free_port, percentile  # noqa: E402
from results import record  # noqa: E402

from mailbus.app.migrate import apply_migrations, apply_roles  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402

CAMPAIGNS = 21  # 20 finished, the last one running
OPEN_ROWS = 3000
TEMPLATES = 8

FILL = f"""
INSERT INTO email_sends (dedupe_key, to_address, template, priority, status, attempts,
    message_id, guarantee, campaign_id, created_at, updated_at, accepted_at, published_at)
SELECT 'k' || n, 'user' || (n %% 5000000) || '@example.com', 'template-' || (n %% {TEMPLATES}),
    p, s, 1, CASE WHEN s = 'accepted' THEN 'msg-' || n END, 'exactly_once',
    CASE WHEN p = 'p2' THEN 1 + (n - 1) * {CAMPAIGNS} / %(rows)s END,  -- one after the other
    at, at, CASE WHEN s = 'accepted' THEN at END, at
FROM (SELECT n,
        CASE WHEN n %% 20 = 0 THEN 'p0' WHEN n %% 20 < 6 THEN 'p1' ELSE 'p2' END AS p,
        CASE n %% 100 WHEN 1 THEN 'failed' WHEN 2 THEN 'failed' WHEN 3 THEN 'suppressed'
            WHEN 4 THEN 'suppressed' WHEN 5 THEN 'expired' ELSE 'accepted' END AS s,
        now() - interval '30 days' * (1 - n::float8 / %(rows)s) AS at
      FROM generate_series(%(first)s::bigint, %(last)s::bigint) n) g
"""
OPEN = """
INSERT INTO email_sends (dedupe_key, to_address, template, priority, status, attempts,
    created_at)
SELECT 'open-' || n, 'open' || n || '@example.com', 'template-1',
    (ARRAY['p0', 'p1', 'p2'])[1 + n %% 3], (ARRAY['pending', 'sending', 'unknown'])[1 + n %% 3],
    n %% 2, now() - interval '1 second' * n
FROM generate_series(1, %(n)s) n
"""
ATTEMPTS = """
INSERT INTO email_attempts (send_id, attempt, outcome, status_code, latency_ms, at)
SELECT id, 1, status, CASE WHEN status = 'failed' THEN 422 ELSE 200 END, 40 + id %% 60,
    updated_at
FROM email_sends WHERE id BETWEEN %(first)s AND %(last)s
"""
DEAD_LETTERS = """
INSERT INTO email_dead_letters (send_id, dedupe_key, priority, template, reason, status_code,
    error, attempts, created_at, published_at, replayed_at)
SELECT id, dedupe_key, priority, template,
    CASE WHEN id %% 3 = 0 THEN 'rejected' ELSE 'max_attempts' END, 422, 'refused', 1,
    updated_at, updated_at, CASE WHEN id > %(recent)s THEN NULL ELSE updated_at END
FROM email_sends WHERE status = 'failed'
"""
CAMPAIGN_ROWS = """
INSERT INTO campaigns (name, template, state, rate_per_min, recipients, processed,
    created_rows, checkpoint, started_at, ended_at)
SELECT 'bench-' || c, 'template-1', CASE WHEN c = %(n)s THEN 'running' ELSE 'finished' END,
    100000, count(*), count(*), count(*), count(*), min(created_at),
    CASE WHEN c < %(n)s THEN max(updated_at) END
FROM generate_series(1, %(n)s) c JOIN email_sends s ON s.campaign_id = c GROUP BY c ORDER BY c
"""
SUPPRESSIONS = """
INSERT INTO email_suppressions (address, reason)
SELECT 'user' || n || '@example.com', 'bounced' FROM generate_series(1, 5000000, 5) n
"""


def fill(url: str, rows: int, chunk: int = 1_000_000) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for first in range(1, rows + 1, chunk):
            last = min(rows, first + chunk - 1)
            started = time.monotonic()
            conn.execute(FILL, {"first": first, "last": last, "rows": rows})
            conn.execute(ATTEMPTS, {"first": first, "last": last})
            print(f"  rows {first:,}-{last:,}: {time.monotonic() - started:.0f}s", flush=True)
        conn.execute(OPEN, {"n": OPEN_ROWS})
        # The rows of failed sends with the highest ids: the 1,000 newest dead letters are open.
        recent = conn.execute(
            "SELECT id FROM email_sends WHERE status = 'failed'"
            " ORDER BY id DESC OFFSET 1000 LIMIT 1"
        ).fetchone()
        conn.execute(DEAD_LETTERS, {"recent": recent[0] if recent else 0})
        conn.execute(CAMPAIGN_ROWS, {"n": CAMPAIGNS})
        conn.execute(SUPPRESSIONS)
        for table in ("email_sends", "email_attempts", "email_dead_letters", "campaigns",
                      "email_suppressions"):  # fmt: skip
            conn.execute(f"VACUUM ANALYZE {table}")


def samples(url: str, n: int) -> dict[str, list[str]]:
    """Values each page is asked about: random rows' keys, addresses, message ids, letters."""
    with psycopg.connect(url) as conn:
        top = conn.execute("SELECT max(id) FROM email_sends").fetchone()
        ids = [random.randint(1, int(top[0]) - OPEN_ROWS) for _ in range(n)] if top else []
        rows = conn.execute(
            "SELECT dedupe_key, to_address, coalesce(message_id, dedupe_key) FROM email_sends"
            " WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
        letters = conn.execute(
            "SELECT id FROM email_dead_letters ORDER BY random() LIMIT %s", (n,)
        ).fetchall()
    return {
        "key": [r[0] for r in rows],
        "address": [r[1].upper() for r in rows],
        "message_id": [r[2] for r in rows],
        "letter": [str(r[0]) for r in letters],
        "text": [f"user{random.randint(1, 4_999_999)}" for _ in range(n)],
        "campaign": [str(random.randint(1, CAMPAIGNS)) for _ in range(n)],
    }


# page → (path template, the sample it takes); {x} is replaced by one sample value.
PAGES = {
    "overview": ("/", None),
    "mail by dedupe key": ("/mail?q={x}", "key"),
    "mail by address": ("/mail?q={x}", "address"),
    "mail by message id": ("/mail?q={x}", "message_id"),
    "dead letters": ("/dead-letters", None),
    "dead letters by reason": ("/dead-letters?reason=rejected", None),
    "dead letters by template and age": ("/dead-letters?template=template-3&since=2d", None),
    "dead letter": ("/dead-letters/{x}", "letter"),
    "replay dry run": ("/dead-letters/replay?reason=rejected", None),
    "campaigns": ("/campaigns", None),
    "campaign": ("/campaigns/{x}", "campaign"),
    "suppressions search": ("/suppressions?q={x}", "text"),
    "audit": ("/audit", None),
}
HEADERS = {"X-Bench-User": "bench"}


async def time_pages(base: str, values: dict[str, list[str]], n: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {}
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        for name, (path, sample) in PAGES.items():
            async with session.get(base + path.format(x="warm-up")) as answer:
                await answer.read()
            times = []
            for i in range(n):
                x = values[sample][i % len(values[sample])] if sample else ""
                url = base + path.format(x=x)
                started = time.perf_counter()
                async with session.get(url, allow_redirects=False) as answer:
                    await answer.read()
                    if answer.status != 200:
                        raise RuntimeError(f"{url}: {answer.status}")
                times.append((time.perf_counter() - started) * 1000)
            timings[name] = times
    return timings


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def upload(base: str, audience: Path, name: str) -> float:
    """Seconds to create a campaign from ``audience`` through /campaigns/new."""
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        async with session.get(base + "/campaigns/new") as answer:
            found = CSRF.search(await answer.text())
        assert found is not None
        form = aiohttp.FormData()
        form.add_field("csrf", found.group(1))
        form.add_field("name", name)  # a name of its own: the same name is the same campaign
        form.add_field("template", "newsletter")
        form.add_field("rate", "600")
        started = time.monotonic()
        with audience.open("rb") as csv:
            form.add_field("audience", csv, filename="audience.csv", content_type="text/csv")
            timeout = aiohttp.ClientTimeout(total=1800)
            async with session.post(base + "/campaigns/new", data=form, timeout=timeout) as answer:
                text = await answer.text()
        seconds = time.monotonic() - started
    if answer.status != 200 or "recipients imported" not in text:
        raise RuntimeError(f"upload answered {answer.status}: {text[-500:]}")
    return seconds


def cli_create(env: dict[str, str], audience: Path, name: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "mailbus", "campaign", "create", "--name", name, "--template",
         "newsletter", "--audience", str(audience), "--rate", "600/min"],
        cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - started


def generate_csv(path: Path, n: int) -> None:
    with path.open("w", buffering=1 << 20) as out:
        out.write("user_id,email,first_name\n")
        for i in range(1, n + 1):
            out.write(f"{i},reader{i}@example.com,Name{i}\n")


EXPLAINED = {
    "overview: open rows by priority and status": (
        "SELECT priority, status, count(*) FROM email_sends"
        " WHERE status IN ('pending', 'sending', 'unknown') GROUP BY priority, status"
    ),
    "overview: oldest open row per priority": (
        "SELECT priority, extract(epoch FROM now() - min(created_at)) FROM email_sends"
        " WHERE status IN ('pending', 'sending', 'unknown') GROUP BY priority"
    ),
    "overview: not yet on Kafka": (
        "SELECT count(*) FROM email_sends WHERE status = 'pending' AND published_at IS NULL"
    ),
    "overview: accepted per minute": (
        "SELECT date_trunc('minute', at), count(*) FROM email_attempts"
        " WHERE at >= now() - interval '1 hour' AND outcome = 'accepted' GROUP BY 1 ORDER BY 1"
    ),
    "find a mail (key, message id or address)": (
        "SELECT dedupe_key FROM email_sends WHERE dedupe_key = 'k123' OR message_id = 'k123'"
        " OR lower(to_address) = lower('k123') ORDER BY id DESC LIMIT 50"
    ),
    "campaigns: open mail of the listed campaigns": (
        "SELECT campaign_id, count(*) FROM email_sends WHERE campaign_id = ANY('{1,2,3}')"
        " AND status IN ('pending', 'sending', 'unknown') GROUP BY campaign_id"
    ),
    "overview: dead letters not replayed": (
        "SELECT reason, count(*) FROM email_dead_letters WHERE replayed_at IS NULL"
        " GROUP BY reason ORDER BY count(*) DESC, reason"
    ),
    "campaign: bounced, complained, unsubscribed": (
        "SELECT count(*) FILTER (WHERE delivery_status = 'bounced'),"
        " count(*) FILTER (WHERE delivery_status = 'complained'),"
        " (SELECT count(*) FROM email_suppressions x WHERE x.source = 'campaign:3'"
        " AND x.reason = 'unsubscribed') FROM email_sends"
        " WHERE campaign_id = 3 AND delivery_status IN ('bounced', 'complained')"
    ),
    "campaign: its mail by status": (
        "SELECT status, count(*) FROM email_sends WHERE campaign_id = 3 GROUP BY status"
    ),
    "suppressions: search": (
        "SELECT address, reason, scope, source, created_at FROM email_suppressions"
        " WHERE address LIKE '%' || lower('USER123456') || '%' ORDER BY address LIMIT 100"
    ),
}


def explain(url: str) -> dict[str, str]:
    plans = {}
    with psycopg.connect(url) as conn:
        for name, query in EXPLAINED.items():
            rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {query}").fetchall()
            plans[name] = "\n".join(r[0] for r in rows)
    return plans


def spread(values: list[float], digits: int = 1) -> str:
    figures = (min(values), statistics.median(values), max(values))
    return " | ".join(f"{v:,.{digits}f}" for v in figures)


def write_doc(path: Path, args: argparse.Namespace, results: dict[str, Any]) -> None:
    command = (
        f"flock /tmp/mailbus-heavy.lock python3 bench/console_pages.py --rows {args.rows}"
        f" --requests {args.requests} --runs {args.runs} --upload-lines {args.upload_lines}"
        f" --doc {args.doc}"
    )
    lines = [
        "# The console at scale", "",
        f"`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, on the machine of"
        " [the benchmarks](../benchmarks.md); load average (1 min) "
        f"{results['load_before']:.1f} before, {results['load_after']:.1f} after. How the data"
        " is made is in the script's docstring; each page is asked"
        f" {args.requests} times a run (another mail, address or letter each time), over one"
        " kept-alive connection from the same machine: the time to the last byte, so the"
        " server's time plus a loopback round trip.", "",
        f"## Pages, {args.rows:,} settled rows in email_sends", "",
        "p50 and p95 of each run; min | median | max over the runs, in ms.", "",
        "| page | p50 min | p50 median | p50 max | p95 min | p95 median | p95 max |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for name in PAGES:
        p50 = [run[name][0] for run in results["pages"]]
        p95 = [run[name][1] for run in results["pages"]]
        lines.append(f"| {name} | {spread(p50)} | {spread(p95)} |")
    n = args.upload_lines
    console = [n / s for s in results["upload_s"]]
    cli = [n / s for s in results["cli_s"]]
    lines += [] if not n else [
        "", f"## Upload of a {n:,}-line CSV", "",
        "Recipients imported a second, min | median | max over the runs: the console streams"
        " the upload to the importer as it arrives; `mailbus campaign create --audience FILE`"
        " reads the same file from disk, its process start-up included (about 2 s here)."
        " Both into the database above.", "",
        "| path | min | median | max |", "| --- | ---: | ---: | ---: |",
        f"| console upload (`POST /campaigns/new`) | {spread(console, 0)} |",
        f"| `mailbus campaign create` | {spread(cli, 0)} |",
    ]  # fmt: skip
    lines += [
        "", "## The plans behind the overview and the search", "",
        f"`EXPLAIN (ANALYZE, BUFFERS)` on the same {args.rows:,} rows, as mailbus_operator.", "",
    ]  # fmt: skip
    for name, plan in results["plans"].items():
        lines += [f"**{name}**", "", "```", plan, "```", ""]
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--upload-lines", type=int, default=1_000_000)
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    base_url = os.environ.get(
        "MAILBUS_DATABASE_URL", "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
    )
    dbname = f"mailbus_bench_console_{uuid.uuid4().hex[:8]}"
    role, password = f"bench_console_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' IN ROLE mailbus_operator")
    owner_url = base_url.rsplit("/", 1)[0] + f"/{dbname}"
    operator_url = re.sub(r"//[^@]*@", f"//{role}:{password}@", owner_url)
    console: subprocess.Popen[bytes] | None = None
    try:
        apply_migrations(owner_url)
        apply_roles(owner_url)
        started = time.monotonic()
        print(f"filling {dbname} with {args.rows:,} settled rows", flush=True)
        fill(owner_url, args.rows)
        print(f"filled in {time.monotonic() - started:.0f}s", flush=True)
        tmp = Path(tempfile.mkdtemp(prefix="console-bench-"))
        users = tmp / "users"
        users.write_text("bench:operator:-\n")
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "client")]),
            "MAILBUS_DATABASE_URL": operator_url,
            "MAILBUS_LOG_LEVEL": "WARNING",
        }
        console = subprocess.Popen(
            [sys.executable, "-m", "mailbus", "console"],
            cwd=REPO,
            env={**env, "MAILBUS_CONSOLE_LISTEN": f"127.0.0.1:{port}",
                 "MAILBUS_CONSOLE_USERS_FILE": str(users),
                 "MAILBUS_CONSOLE_PROXY_HEADER": "X-Bench-User",
                 "MAILBUS_CONSOLE_PROXY_SOURCES": "127.0.0.1"},
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        audience = tmp / "audience.csv"
        if args.upload_lines:
            generate_csv(audience, args.upload_lines)
        results: dict[str, Any] = {"pages": [], "upload_s": [], "cli_s": []}
        results["load_before"] = os.getloadavg()[0]
        for run in range(args.runs):
            values = samples(operator_url, args.requests)
            timings = asyncio.run(time_pages(base, values, args.requests))
            figures = {k: (percentile(v, 50), percentile(v, 95)) for k, v in timings.items()}
            results["pages"].append(figures)
            for name, (p50, p95) in figures.items():
                record(f"console {name} p50", p50, "ms")
                record(f"console {name} p95", p95, "ms")
                print(f"run {run + 1}: {name:<34} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
            if not args.upload_lines:
                continue
            results["upload_s"].append(asyncio.run(upload(base, audience, f"upload-{run}")))
            results["cli_s"].append(cli_create(env, audience, f"cli-{run}"))
            for what in ("upload_s", "cli_s"):
                rate = args.upload_lines / results[what][-1]
                record(f"console {what} lines/s", rate, "lines/s")
                print(f"run {run + 1}: {what} {results[what][-1]:.1f}s ({rate:,.0f} lines/s)")
        results["load_after"] = os.getloadavg()[0]
        results["plans"] = explain(operator_url)
        for name, plan in results["plans"].items():
            print(f"{name}:\n{plan}\n")
        if args.doc:
            write_doc(args.doc, args, results)
    finally:
        if console is not None:
            console.terminate()
            console.wait(30)
        drop_database(base_url, dbname)
        with psycopg.connect(base_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


if __name__ == "__main__":
    main()
