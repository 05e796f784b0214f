"""Campaign benchmark: audience import and fan-out of a generated CSV (or of a SQL query
over an application table, ``--source sql``), rows/s and peak RSS.

Each run gets a fresh database (migrated), 1% of the audience in ``email_suppressions``
(half of them in upper case), then times real processes, twice:

- one after the other: ``mailbus campaign create --audience FILE.csv`` (CSV →
  campaign_recipients by COPY, in parts), or with ``--source sql`` ``mailbus campaign
  create --audience-sql "SELECT id AS user_id, email, first_name, plan FROM app_users"``
  over a table of the same recipients made in the run's database beforehand; then
  ``mailbus campaign run ID`` with an unbounded rate (recipients → email_sends rows, in
  transactions of ``mailbus.campaigns.pacer.MAX_BATCH``): the import's and the fan-out's own
  speeds;
- together, as an operator runs it: ``campaign create --start`` while ``campaign run ID``
  hands out the parts already imported (the run starts once the campaign row exists).

Rows/s = recipients / seconds from the create's start to the last row written; peak RSS
from each process's rusage. Three runs by default; min / median / max printed. Needs
only PostgreSQL.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from results import record  # noqa: E402

from mailbus.app.migrate import apply_migrations  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402


def generate(path: Path, n: int) -> None:
    with path.open("w", buffering=1 << 20) as out:
        out.write("user_id,email,first_name,plan\n")
        for i in range(1, n + 1):
            out.write(f"{i},user{i}@example.com,Name{i},{'gold' if i % 3 else 'free'}\n")


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mailbus", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def finish(process: subprocess.Popen[bytes], args: list[str]) -> tuple[int, str]:
    """Wait for ``process``; return (peak RSS in MB, stdout)."""
    assert process.stdout is not None
    out = process.stdout.read().decode()
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"mailbus {' '.join(args)} exited {process.returncode}")
    return usage.ru_maxrss // 1024, out


def timed(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Run ``mailbus ARGS``; return (seconds, peak RSS in MB, stdout)."""
    started = time.monotonic()
    rss, out = finish(start(args, env), args)
    return time.monotonic() - started, rss, out


SQL_AUDIENCE = "SELECT id AS user_id, email, first_name, plan FROM app_users"


def one_run(base_url: str, audience: Path, n: int, source: str) -> dict[str, float]:
    what = ["--audience", str(audience)]
    if source == "sql":
        what = ["--audience-sql", SQL_AUDIENCE]
    create = ["campaign", "create", "--name", "bench", "--template", "newsletter",
              *what, "--rate", "1000000000/min"]  # fmt: skip
    with fresh_database(base_url, n, source) as (url, env):
        create_s, create_rss, out = timed(create, env)
        campaign_id = out.strip().splitlines()[-1]
        fan_out_s, run_rss, _ = timed(["campaign", "run", campaign_id], env)
        check_rows(url, campaign_id, n)
    with fresh_database(base_url, n, source) as (url, env):
        started = time.monotonic()
        creating = start([*create, "--start"], env)
        # The first campaign of a fresh database: its id is 1 once the row is committed.
        with psycopg.connect(url, autocommit=True) as conn:
            while not conn.execute("SELECT 1 FROM campaigns").fetchall():
                time.sleep(0.01)
        run_args = ["campaign", "run", "1", "--no-progress"]
        running = start(run_args, env)
        together_create_rss, _ = finish(creating, create)
        together_run_rss, _ = finish(running, run_args)
        together_s = time.monotonic() - started
        check_rows(url, "1", n)
    return {
        "import_s": create_s,
        "fan_out_s": fan_out_s,
        "import_rps": n / create_s,
        "fan_out_rps": n / fan_out_s,
        "sequential_rps": n / (create_s + fan_out_s),
        "together_s": together_s,
        "total_rps": n / together_s,
        "create_rss": max(create_rss, together_create_rss),
        "run_rss": max(run_rss, together_run_rss),
    }


@contextlib.contextmanager
def fresh_database(base_url: str, n: int, source: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A migrated database of its own with 1% of the audience suppressed (and, for a SQL
    audience, the application's table); yields its URL and the processes' environment."""
    dbname = f"mailbus_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    url = base_url.rsplit("/", 1)[0] + f"/{dbname}"
    try:
        apply_migrations(url)
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO email_suppressions (address)"
                " SELECT CASE WHEN i %% 200 = 0 THEN upper(format('user%%s@example.com', i))"
                " ELSE format('user%%s@example.com', i) END"
                " FROM generate_series(100, %s, 100) AS i",
                (n,),
            )
            if source == "sql":  # the application's table: the same recipients as the CSV
                conn.execute(
                    "CREATE TABLE app_users (id bigint PRIMARY KEY, email text NOT NULL,"
                    " first_name text, plan text)"
                )
                conn.execute(
                    "INSERT INTO app_users SELECT i, format('user%%s@example.com', i),"
                    " format('Name%%s', i), CASE WHEN i %% 3 = 0 THEN 'free' ELSE 'gold' END"
                    " FROM generate_series(1, %s) AS i",
                    (n,),
                )
                conn.execute("ANALYZE app_users")
        yield url, {**os.environ, "MAILBUS_DATABASE_URL": url, "MAILBUS_LOG_LEVEL": "WARNING"}
    finally:
        drop_database(base_url, dbname)


def check_rows(url: str, campaign_id: str, n: int) -> None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_sends WHERE campaign_id = %s", (int(campaign_id),)
        ).fetchone()
    rows = int(row[0]) if row else 0
    if rows != n - n // 100:
        raise RuntimeError(f"{rows} rows, expected {n - n // 100}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipients", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", choices=("csv", "sql"), default="csv")
    args = parser.parse_args()
    base_url = os.environ.get(
        "MAILBUS_DATABASE_URL", "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
    )
    with tempfile.TemporaryDirectory() as tmp:
        audience = Path(tmp) / "audience.csv"
        generate(audience, args.recipients)
        size_mb = audience.stat().st_size / 1e6
        print(
            f"audience ({args.source}): {args.recipients:,} recipients,"
            f" {size_mb:.0f} MB as CSV, 1% suppressed"
        )
        runs = []
        for i in range(args.runs):
            result = one_run(base_url, audience, args.recipients, args.source)
            runs.append(result)
            record("campaign import + fan-out rows/s", result["total_rps"], "rows/s")
            record("campaign import, then fan-out rows/s", result["sequential_rps"], "rows/s")
            record("campaign import rows/s", result["import_rps"], "rows/s")
            record("campaign fan-out rows/s", result["fan_out_rps"], "rows/s")
            record("campaign peak RSS, run", result["run_rss"], "MB")
            print(
                f"run {i + 1}: import {result['import_s']:.1f}s ({result['import_rps']:,.0f}/s),"
                f" then fan-out {result['fan_out_s']:.1f}s ({result['fan_out_rps']:,.0f}/s):"
                f" {result['sequential_rps']:,.0f} rows/s; together"
                f" {result['together_s']:.1f}s ({result['total_rps']:,.0f} rows/s);"
                f" peak RSS create {result['create_rss']} MB, run {result['run_rss']} MB"
            )
    for key, label in (
        ("total_rps", "import + fan-out together rows/s"),
        ("sequential_rps", "import, then fan-out rows/s"),
        ("import_rps", "import alone rows/s"),
        ("fan_out_rps", "fan-out alone rows/s"),
        ("create_rss", "peak RSS create (MB)"),
        ("run_rss", "peak RSS run (MB)"),
    ):
        values = sorted(r[key] for r in runs)
        print(
            f"{label:<33} min {values[0]:>10,.0f}  median {statistics.median(values):>10,.0f}"
            f"  max {values[-1]:>10,.0f}"
        )


if __name__ == "__main__":
    main()
