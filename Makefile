.PHONY: run test bench fuzz lint format

# Serve the app on the embedded default (SQLite, ORM task broker, demo data) at http://127.0.0.1:8000/
run:
	bash scripts/run.sh

# Install and start what the suite needs (PostgreSQL, Redis, Chromium), then lint and run every test.
test:
	bash scripts/test.sh

# Benchmarks print figures; they need what `make test` sets up.
bench:
	bash scripts/test.sh --bench

# The property-based fuzz suite (tests/fuzz) with a larger budget: FUZZ_EXAMPLES examples per target (the HUD
# target a third of that; 2400 sends about 10,400 requests); prints requests sent and 5xx seen.
fuzz:
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-2400} bash scripts/test.sh --fuzz

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format:
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .
