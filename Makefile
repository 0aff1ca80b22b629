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

# Three workers on this 2-vCPU machine (labs mostly wait on the kernel: two
# kept the CPUs 57 % busy, 14 m 18 s; three 73 %, 11 m 5 s, 2026-11-30), one
# test file per worker at a time so a file's module fixtures are built once;
# then the few tests that watch host-wide state (every namespace's pins), alone.
TEST_WORKERS ?= 3
test: deps shapes
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=20 tests; \
	parallel=$$?; $(PYTHON) -m pytest -q -m serial tests; serial=$$?; \
	[ $$parallel -eq 0 ] && [ $$serial -eq 0 ]

bench: deps shapes
	$(PYTHON) -m controller.cli bench router

clean:
	rm -rf build *.egg-info .pytest_cache linuxfp/shapes
