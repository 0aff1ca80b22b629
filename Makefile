# The two entry points of the README: each installs what it needs first.
PYTHON ?= python3

.PHONY: deps demo test bench clean

deps:
	./scripts/install-deps.sh

demo: deps
	$(PYTHON) -m controller.cli demo router

test: deps
	$(PYTHON) -m pytest -q tests

bench: deps
	$(PYTHON) -m controller.cli bench router

clean:
	rm -rf build *.egg-info .pytest_cache
