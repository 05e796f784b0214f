"""Runs every benchmark under bench/ and the peers (PgQueuer, Debezium's outbox router), then
writes docs/benchmarks.md with the machine, min / median / max tables and PNG charts.

    python3 bench/report.py [--runs 3] [--quick] [--only relay,delivery,...] [--lock FILE]
    python3 bench/report.py --smoke [--only ...]   # each once at a tiny size; stores nothing

Each benchmark script hands its figures over through bench/results.py; the raw results are
kept in docs/benchmarks/results.json, so ``--only`` re-runs some benchmarks and keeps the
others' last results. ``--lock FILE`` takes an exclusive flock on FILE around each benchmark
(other heavy jobs on the machine wait for it, and it for them). Needs the local stack.

Each stored result names the commit it was measured on; a section whose code (``measures``)
changed since that commit says so, so an old figure is never read as today's. ``--smoke``
runs every benchmark once at a size of seconds, as `make test` does, so a benchmark that
hangs or breaks fails CI rather than the next report.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import freshness
import machine
import report_doc
import results

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs"
STORE = DOCS / "benchmarks" / "results.json"
LATENCY_MS = 50


@dataclass(frozen=True)
class Spec:
    title: str
    about: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    runs_flag: bool = False  # the script repeats itself with --runs N
    sweep: tuple[tuple[str, ...], ...] = ((),)  # extra argument sets, each one invocation
    smoke: tuple[str, ...] = ()  # seconds, not figures: `make test` runs it (--smoke)
    measures: tuple[str, ...] = ()  # the code its figures describe, as git paths


SPECS: dict[str, Spec] = {
    "relay": Spec(
        "Relay: outbox → Kafka",
        "Rows/s of `mailbus relay` (batched and one row per"
        " transaction; first commit → last broker append, the relay already running),"
        " PostgreSQL's claim+mark ceiling and commit→broker-append latency at a steady rate.",
        "relay_throughput.py",
        (),
        ("--rows", "10000", "--naive-rows", "1000", "--rate", "200", "--seconds", "5"),
        smoke=("--rows", "2000", "--naive-rows", "200", "--rate", "100", "--seconds", "2"),
        measures=("relay", "schemas", "bench/relay_throughput.py"),
    ),
    "delivery": Spec(
        "Delivery: Kafka → provider",
        "Emails/s of `mailbus consume` against the sandbox"
        f" provider answering after {LATENCY_MS} ms, commit→accepted latency at a steady rate.",
        "delivery_throughput.py",
        ("--runs", "1"),
        ("--runs", "1", "--rows", "3000", "--rate", "100", "--seconds", "10"),
        smoke=(
            *("--runs", "1", "--max-consumers", "1"),
            *("--rows", "300", "--rate", "50", "--seconds", "2"),
        ),
        measures=("consumer", "relay", "schemas", "bench/delivery_throughput.py"),
    ),
    "in_flight": Spec(
        "Delivery against the in-flight limit",
        "One consumer's emails/s at"
        " MAILBUS_MAX_IN_FLIGHT 8, 16, 32 and 64; the bound is in-flight ÷ provider latency.",
        "delivery_throughput.py",
        ("--runs", "1", "--max-consumers", "1", "--no-steady", "--rows", "10000"),
        ("--runs", "1", "--max-consumers", "1", "--no-steady", "--rows", "2000"),
        sweep=tuple(("--in-flight", str(n)) for n in (8, 16, 32, 64)),
        smoke=("--runs", "1", "--max-consumers", "1", "--no-steady", "--rows", "300"),
        measures=("consumer", "relay", "schemas", "bench/delivery_throughput.py"),
    ),
    "outage": Spec(
        "Provider outage",
        "Orders keep arriving while the provider answers 503; backlog"
        " peak, drain time against its prediction, P0 delays.",
        "outage.py",
        (),
        ("--compress", "20", "--before-s", "10"),
        smoke=("--compress", "40", "--rate-limit", "200", "--before-s", "1"),
        measures=("consumer", "relay", "bench/outage.py"),
    ),
    "intake": Spec(
        "Intake: OrderPlaced events → email_sends",
        "Events/s of `mailbus intake`.",
        "intake_throughput.py",
        (),
        ("--events", "10000"),
        runs_flag=True,
        smoke=("--events", "1000"),
        measures=("intake", "schemas", "bench/intake_throughput.py"),
    ),
    "webhooks": Spec(
        "Webhook ingestion",
        "Signed delivery events/s through `mailbus webhooks`.",
        "webhooks.py",
        (),
        ("--events", "2000", "--sends", "1000"),
        runs_flag=True,
        smoke=("--events", "300", "--sends", "100"),
        measures=("feedback", "bench/webhooks.py"),
    ),
    "smtp": Spec(
        "SMTP adapter",
        "Sends/s to a local aiosmtpd sink.",
        "smtp_throughput.py",
        (),
        ("--seconds", "2"),
        runs_flag=True,
        smoke=("--seconds", "0.5"),
        measures=("providers/smtp/sending.py", "bench/smtp_throughput.py"),
    ),
    "adapters": Spec(
        "Provider adapters' call path",
        "Sends/s of each provider adapter alone at 64 in flight against the sandbox's"
        " dialect of that provider (50 ms), and its share of the `http` default's figure;"
        " SES through the AWS SDK against moto, which adds no latency, so its share is"
        " over `http` against a sandbox adding none either.",
        "adapter_call_path.py",
        (),
        ("--seconds", "2"),
        runs_flag=True,
        smoke=("--seconds", "0.5"),
        measures=("consumer/provider.py", "providers", "bench/adapter_call_path.py"),
    ),
    "campaign_fanout": Spec(
        "Campaign import and fan-out",
        "Recipients/s from CSV to email_sends rows.",
        "campaign_fanout.py",
        (),
        ("--recipients", "20000"),
        runs_flag=True,
        smoke=("--recipients", "1000"),
        measures=("campaigns", "bench/campaign_fanout.py"),
    ),
    "campaign_p0": Spec(
        "P0 latency during a campaign",
        "Password resets' commit→accepted while a campaign drains on p2.",
        "campaign_p0_latency.py",
        (),
        ("--recipients", "20000", "--seconds", "10"),
        runs_flag=True,
        smoke=("--recipients", "1000", "--seconds", "3"),
        measures=("relay", "consumer", "campaigns", "bench/campaign_p0_latency.py"),
    ),
    "client": Spec(
        "Client: enqueue in a loop against enqueue_many",
        "Rows/s a domain service enqueues with mailbus_client in one transaction:"
        " `enqueue` per row against one `enqueue_many` call, on a psycopg Connection and"
        " an AsyncConnection.",
        "enqueue_many.py",
        (),
        ("--rows", "2000"),
        runs_flag=True,
        smoke=("--rows", "300"),
        measures=("client/mailbus_client", "bench/enqueue_many.py"),
    ),
    "pgqueuer": Spec(
        "Peer: PgQueuer",
        "PgQueuer's enqueue → dequeue → complete cycle on the same"
        " PostgreSQL, one worker at our in-flight limit (64): each job making the HTTP call"
        " `mailbus consume` makes (`HttpProvider`, its aiohttp transport) to the sandbox"
        f" answering after {LATENCY_MS} ms, and, for PgQueuer's own ceiling, no call. Jobs/s"
        " over the middle 80% of completions, the worker's CPU per job over the drain and"
        " PostgreSQL transactions per job.",
        "peers/pgqueuer_cycle.py",
        (),
        ("--jobs", "3000"),
        runs_flag=True,
        smoke=("--jobs", "300"),
        measures=("bench/peers/pgqueuer_cycle.py",),
    ),
    "debezium": Spec(
        "Peer: Debezium outbox event router",
        "Debezium's PostgreSQL connector with"
        " `io.debezium.transforms.outbox.EventRouter` under Kafka Connect standalone, on its"
        " own PostgreSQL cluster (wal_level=logical, port 5433) and the same broker. The"
        " connector keeps Debezium's defaults (pgoutput, poll.interval.ms 500, max.batch.size"
        " 2048), so its commit→broker latency includes up to one poll interval.",
        "peers/debezium_outbox.py",
        (),
        ("--rows", "10000", "--rate", "200", "--seconds", "5"),
        runs_flag=True,
        smoke=("--rows", "1000", "--rate", "100", "--seconds", "2"),
        measures=("bench/peers",),
    ),
}


@contextmanager
def locked(path: str | None):  # type: ignore[no-untyped-def]
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def invoke(args: list[str]) -> dict[str, Any]:
    """One invocation of a script: its figures, series and the load around it."""
    with tempfile.TemporaryDirectory() as tmp:
        sink = os.path.join(tmp, "results.jsonl")
        load_before, started = os.getloadavg(), time.monotonic()
        print(f"[report] {' '.join(args)}", flush=True)
        done = subprocess.run(
            [sys.executable, *args], cwd=BENCH, env={**os.environ, results.ENV: sink},
            stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        figures, series = results.read(sink)
        error = None
        if done.returncode != 0:
            error = (done.stderr.strip().splitlines() or ["?"])[-1][:300]
            print(done.stderr[-3000:], file=sys.stderr)
        return {
            "figures": figures, "series": series, "load_before": load_before,
            "load_after": os.getloadavg(), "seconds": time.monotonic() - started, "error": error,
        }  # fmt: skip


def run_bench(spec: Spec, runs: int, quick: bool, lock: str | None) -> dict[str, Any]:
    base = [spec.script, *(spec.quick if quick else spec.full)]
    outcomes = []
    with locked(lock):  # the whole benchmark, so no other heavy job runs between its runs
        for extra in spec.sweep:
            if spec.runs_flag:
                outcomes.append(invoke([*base, *extra, "--runs", str(runs)]))
            else:
                outcomes += [invoke([*base, *extra]) for _ in range(runs)]
    shown = " ".join(base + (["--runs", str(runs)] if spec.runs_flag else []))
    if spec.sweep != ((),):
        shown += " with " + ", ".join(" ".join(extra) for extra in spec.sweep)
    return {
        "command": f"python3 bench/{shown}",
        "commit": freshness.head(BENCH.parent),
        "quick": quick,
        "taken": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": outcomes,
    }


def smoke(names: list[str]) -> int:
    """Each benchmark once at its smoke size; the number that failed or recorded nothing."""
    failed = 0
    for name in names:
        spec = SPECS[name]
        args = [spec.script, *spec.smoke, *(("--runs", "1") if spec.runs_flag else ())]
        outcome = invoke([*args, *spec.sweep[-1]])
        if outcome["error"] or not outcome["figures"]:
            failed += 1
            print(f"[smoke] {name} FAILED: {outcome['error'] or 'no figure recorded'}")
        else:
            print(f"[smoke] {name}: {len(outcome['figures'])} figures, {outcome['seconds']:.0f} s")
    return failed


def peers_section(store: dict[str, Any]) -> str:
    def summaries(name: str) -> list[report_doc.Summary]:
        runs = store.get(name, {}).get("runs", [])
        return report_doc.summarize(f for r in runs for f in r.get("figures", []))

    relay, dbz = summaries("relay"), summaries("debezium")
    delivery, pgq = summaries("delivery"), summaries("pgqueuer")
    f = report_doc.find
    rows = [
        (
            "outbox → broker rows/s (relay / Debezium)",
            f(relay, "relay rows/s, batched"),
            f(dbz, "debezium rows/s"),
        )
    ]
    rows += [
        (
            f"commit → broker {q} (relay / Debezium)",
            f(relay, f"relay commit→ack {q}"),
            f(dbz, f"debezium commit→broker {q}"),
        )
        for q in ("p50", "p99")
    ]
    consumer, worker = "1 consumer(s) at 64 in flight", "with HTTP call, 64 in flight"
    rows += [
        (f"one consumer's emails/s / PgQueuer's jobs/s, the same {LATENCY_MS} ms HTTP call",
         f(delivery, f"delivery emails/s, {consumer}"), f(pgq, f"pgqueuer jobs/s {worker}")),
        ("consumer CPU per mail / PgQueuer worker CPU per job",
         f(delivery, f"consumer CPU per mail, {consumer}"),
         f(pgq, f"pgqueuer worker CPU per job {worker}")),
        ("PostgreSQL transactions per mail / per job",
         f(delivery, f"database transactions per mail, {consumer}"),
         f(pgq, f"pgqueuer transactions per job {worker}")),
        ("jobs/s, no provider call (PgQueuer's ceiling)", None,
         f(pgq, "pgqueuer jobs/s without call, 64 in flight")),
    ]  # fmt: skip
    return report_doc.comparison_table(rows)


def write_doc(store: dict[str, Any], machine_info: dict[str, str]) -> None:
    import report_charts  # matplotlib (the bench extra); --smoke runs without it

    charts_dir = DOCS / "benchmarks"
    charts: dict[str, list[str]] = {name: [] for name in SPECS}
    drawn = [
        ("in_flight", "in_flight.png", report_charts.throughput_by_in_flight),
        ("delivery", "commit_to_accepted.png", report_charts.delivery_latency),
        ("outage", "outage_backlog.png", report_charts.backlog),
    ]  # fmt: skip
    for name, file, draw in drawn:
        if name in store and draw(store[name], charts_dir / file):
            charts[name].append(f"benchmarks/{file}")
    quick = any(entry.get("quick") for entry in store.values())
    sections = [
        report_doc.bench_section(
            SPECS[name].title,
            SPECS[name].about,
            store[name],
            charts[name],
            freshness.staleness(store[name], SPECS[name].measures, BENCH.parent),
        )
        for name in SPECS
        if name in store
    ]
    text = "\n".join([
        "# Benchmarks", "",
        "Written by `make bench-report` (`python3 bench/report.py`); every figure is the"
        " min / median / max over the runs shown, on the machine below. Each benchmark"
        " lists the load average seen before and after its runs (the benchmarks' own"
        " processes, the broker and the database make most of it; `--lock FILE` keeps other"
        " heavy jobs that take the same lock out); read the figures as what this machine"
        " gave then, on two cores shared by every process of the run, not as a ceiling."
        " A speed claim between two commits is an A/B from `bench/compare.py` instead:"
        " [where one mail's time goes](benchmarks/speed.md). The console's pages over 10 M"
        " rows and its upload rate: [the console at scale](benchmarks/console.md)"
        " (`bench/console_pages.py`).",
        *(["", "**Quick sizes** (`--quick`): rows, events and durations reduced to fit the"
           " time available; each section names its exact command. Run `make bench-report`"
           " for full sizes."] if quick else []),
        "", "## Machine", "", report_doc.machine_section(machine_info), "",
        "## mailbus against its peers", "",
        "Medians with (min-max). The relay's and Debezium's rows/s are timed the same way"
        " (bench/broker_times.py): the relay or Connect already running, the rows committed"
        " in 10 transactions, from the first commit to the broker's append of the last"
        " row. One consumer and PgQueuer's worker are timed alike: the work queued before"
        " they start (rows published to Kafka, jobs enqueued), the rate over the middle 80%"
        " of acceptances or completions, each mail or job one HTTP call to the sandbox at 64"
        " in flight; the consumer's CPU is read from /proc over that middle 80%, the worker's"
        " over its whole drain, and transactions are pg_stat_database's count for each"
        " side's database over the run (mailbus's includes the relay's, running beside the"
        " consumer).", "",
        peers_section(store), "", "## Each benchmark", "", *sections,
    ])  # fmt: skip
    (DOCS / "benchmarks.md").write_text(text)


def stored() -> dict[str, Any]:
    return json.loads(STORE.read_text()) if STORE.exists() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated, of: {','.join(SPECS)}")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="reduced sizes")
    parser.add_argument("--lock", help="flock this file around each benchmark")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the document from stored results"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="each once at a tiny size, storing nothing"
    )
    args = parser.parse_args()
    names = [] if args.render_only else args.only.split(",") if args.only else list(SPECS)
    unknown = set(names) - set(SPECS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    if args.smoke:
        sys.exit(1 if smoke(names) else 0)
    machine_info = machine.describe(os.environ["MAILBUS_DATABASE_URL"])
    for name in names:
        entry = run_bench(SPECS[name], args.runs, args.quick, args.lock)
        store = stored()  # read again: another invocation may have stored meanwhile
        store[name] = entry
        STORE.parent.mkdir(parents=True, exist_ok=True)
        STORE.write_text(json.dumps(store, indent=1))
    write_doc(stored(), machine_info)
    print(f"[report] wrote {DOCS / 'benchmarks.md'}")


if __name__ == "__main__":
    main()
