# One command per habit. Each target sets up .venv first (idempotent).
.PHONY: setup demo test test-all lint bench

setup:
	bash scripts/setup.sh

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh -m "not slow"

# Everything, the slow end-to-end runs (Slurm from a fresh clone, ...) included.
test-all:
	bash scripts/test.sh

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench: setup
	.venv/bin/python -c 'import shapely' 2>/dev/null || .venv/bin/python -m pip install --quiet -e '.[test,bench]'
	.venv/bin/python perf/run_all.py
