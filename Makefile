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
# Bytecode first: the suite starts hundreds of controllers and CLIs, each a
# new interpreter, and where PYTHONDONTWRITEBYTECODE is set (as on this
# machine) none would write its bytecode, each compiling every module again
# (~0.25 s a start; test_never_stale.py 103 -> 85 s). Python reads bytecode
# it is told not to write.
test: deps shapes
	$(PYTHON) -m compileall -q linuxfp controller tests > /dev/null
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=20 tests; \
	parallel=$$?; $(PYTHON) -m pytest -q -m serial tests; serial=$$?; \
	[ $$parallel -eq 0 ] && [ $$serial -eq 0 ]

bench: deps shapes
	$(PYTHON) -m controller.cli bench router

clean:
	rm -rf build *.egg-info .pytest_cache linuxfp/shapes
