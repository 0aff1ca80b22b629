# The two entry points of the README: each installs what it needs first.
PYTHON ?= python3

.PHONY: deps demo test bench clean

deps:
	./scripts/install-deps.sh

demo: deps
	linuxfp demo router

test: deps
	$(PYTHON) -m pytest -q tests

bench: deps
	linuxfp bench router

clean:
	rm -rf build *.egg-info .pytest_cache
