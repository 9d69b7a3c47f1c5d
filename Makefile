# Developer shortcuts; the README's two commands are the supported entry points.
PY := .venv/bin/python

.PHONY: install check test test-gpu bench
install:
	./install.sh --dev
check:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy openjet engine setup_wizard agent tui tests bench
test:
	$(PY) -m pytest
test-gpu:
	$(PY) -m pytest tests/gpu
bench:
	$(PY) bench/decode.py
