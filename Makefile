# The README's commands. Everything installs itself on a fresh machine.
PYTHON ?= python3
STACK := bash stack/local-stack.sh
# The docs site (mkdocs.yml) into site/; --strict: a broken link or anchor, or a page missing
# from the nav, fails. Not --quiet: it hides the warnings that --strict counts.
# import-linter's CLI through $(PYTHON), so a virtual environment's own copy runs.
LINT_IMPORTS := $(PYTHON) -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'
DOCS_SITE := NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict
export MAILBUS_DATABASE_URL ?= postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus
export MAILBUS_KAFKA_BOOTSTRAP ?= 127.0.0.1:9092

.PHONY: install constraints stack-up stack-down stack-status demo test test-unit test-client test-distributions release-check checks lint validate bench bench-report docs docs-site

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		-e ./client -e '.[all,test,bench]'
	@# Debian's Chromium for the console's browser test (Playwright drives it; no download)
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	@# Debian's PgBouncer for the transaction-pooling tests (tests/pgbouncer.py)
	test -x /usr/sbin/pgbouncer || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null)

## constraints.txt (the image's exact versions) from pyproject.toml and what is installed.
constraints:
	$(PYTHON) stack/constraints.py --write

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

stack-status:
	$(STACK) status

## The main job end to end on the local stack.
demo: install stack-up
	$(PYTHON) -m mailbus migrate
	$(PYTHON) demo/run_demo.py

## Everything but the tests: lint, import contracts, constraints, the docs site, the
## deployment files.
checks: lint
	$(PYTHON) stack/constraints.py --check  # constraints.txt in step with pyproject.toml
	$(DOCS_SITE)
	PYTHON=$(PYTHON) bash stack/validate.sh

## The whole test suite against the real broker and database. The checks run while the
## stack starts (mostly waiting for its JVMs) and the distributions are tried; then the
## tests that stop a service, alone, while the broker holds few partitions (a restart
## loads every one of them: about 40 s once the lanes have made thousands); then four lanes,
## handed whole files in the order of pyproject.toml's testpaths.
test: install
	$(MAKE) --no-print-directory -j2 --output-sync=target checks test-distributions
	$(PYTHON) -m pytest -m serial
	$(PYTHON) -m pytest -n 4 --dist loadfile --no-loadscope-reorder -m "not serial"

## The slim client's own tests, then the release check (both start the stack).
test-distributions: test-client
	$(MAKE) --no-print-directory release-check

## Both distributions built (sdist and wheel, versioned by the git tag), twine-checked,
## installed into a fresh venv and run: --version, --help, migrate and status on a scratch
## database, the slim client's enqueue (stack/release_check.py, docs/releasing.md).
release-check: stack-up
	$(PYTHON) stack/release_check.py

## The slim client's own tests (client/tests) on the newest Python here, in a venv of just
## the client, psycopg and pytest; $(PYTHON) runs them too, in the suite above.
CLIENT_PYTHON ?= $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3)))
CLIENT_VENV := .stack/client-venv
test-client: stack-up
	@test -n "$(CLIENT_PYTHON)" || { echo "test-client: no Python >= 3.12 found; set CLIENT_PYTHON" >&2; exit 1; }
	rm -rf $(CLIENT_VENV) && $(CLIENT_PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		./client 'psycopg[binary]' pytest sqlalchemy django opentelemetry-sdk
	rm -rf client/build
	MAILBUS_TEST_MIGRATE_PYTHON=$(PYTHON) $(CLIENT_VENV)/bin/python -m pytest client/tests

test-unit: install
	$(PYTHON) -m pytest tests/unit

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy client/mailbus_client mailbus
	$(LINT_IMPORTS)  # the layers of pyproject.toml [tool.importlinter]

## Deployment files (k8s/, docker-compose.yml, ops/alerts.yml) against their schemas and
## promtool, offline: no cluster, Docker engine or Prometheus server needed.
validate: install
	PYTHON=$(PYTHON) bash stack/validate.sh

## docs/configuration.md from the settings table (a test keeps the committed file equal).
docs: install
	$(PYTHON) -m mailbus.kernel.settings_doc > docs/configuration.md
	$(PYTHON) -m mailbus.app.metrics_doc

## The docs site from docs/ (mkdocs-material) into site/, as `make test` builds it.
docs-site: install
	$(DOCS_SITE)

bench: install stack-up
	$(PYTHON) bench/relay_throughput.py
	$(PYTHON) bench/delivery_throughput.py
	$(PYTHON) bench/outage.py
	$(PYTHON) bench/intake_throughput.py

## Every benchmark and the peers (PgQueuer, Debezium) → docs/benchmarks.md and its charts.
## BENCH_REPORT_ARGS: e.g. --quick, --runs 5, --only relay,debezium, --lock FILE.
bench-report: stack-up
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ./client -e '.[all,test,bench]'
	$(PYTHON) bench/report.py $(BENCH_REPORT_ARGS)
