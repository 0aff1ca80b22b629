# The two entry points of the README: each installs what it needs first.
PYTHON ?= python3

.PHONY: deps shapes demo test bench clean

deps:
	./scripts/install-deps.sh

# The precompiled pipeline objects shipped in the package (linuxfp/shapes/):
# only what the sources changed is compiled again; up to date it takes ~1 s.
shapes: deps
	$(PYTHON) -m controller.shapes_cli build

demo: deps shapes
	$(PYTHON) -m controller.cli demo router

test: deps shapes
	$(PYTHON) -m pytest -q --durations=20 tests

bench: deps shapes
	$(PYTHON) -m controller.cli bench router

clean:
	rm -rf build *.egg-info .pytest_cache linuxfp/shapes
