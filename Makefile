.PHONY: run test bench lint format

# Serve the app on the embedded default (SQLite, ORM task broker, demo data) at http://127.0.0.1:8000/
run:
	bash scripts/run.sh

# Install and start what the suite needs (PostgreSQL, Redis, Chromium), then lint and run every test.
test:
	bash scripts/test.sh

# Benchmarks print figures; they need what `make test` sets up.
bench:
	bash scripts/test.sh --bench

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format:
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .
