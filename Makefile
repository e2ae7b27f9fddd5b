# The two set-up commands of the README. Both create .venv when missing,
# install torch (the CPU build pip finds on this machine) and lazyrt with its
# test extras, which builds the Cython extension in place.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lazyrt-installed

.PHONY: run test wheel-check bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

$(STAMP): $(PY) setup.py pyproject.toml $(wildcard lazyrt/*.pyx lazyrt/*.pxd)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q "Cython>=3.0" numpy
	$(PY) -m pip install -q --no-build-isolation -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/lazyrt demo

# The Triton-backend tests run with LAZYRT_TRITON_AOT_TARGET=cuda:90: every
# kernel they generate (under the interpreter) is also compiled for the H200
# (sm_90, ptxas included), so CI proves it compiles there without a GPU. Each
# kernel is compiled once per signature and target, then cached on disk.
TRITON_TESTS := tests/test_triton_backend.py tests/test_triton_aot.py \
	tests/test_triton_math_accuracy.py

# The jax backend runs every backend-parametrized test (-k jax) at the quick
# hypothesis profile (5 examples each: XLA compiles each distinct graph in ~0.1 s,
# so the default 15 would add ~20 min; LAZYRT_TEST_BACKENDS=jax alone runs 15).
JAX_TESTS := LAZYRT_TEST_BACKENDS=jax LAZYRT_HYPOTHESIS_PROFILE=quick

test: $(STAMP)
	$(PY) -m pytest -n auto --durations=25 $(addprefix --ignore=,$(TRITON_TESTS))
	LAZYRT_TRITON_AOT_TARGET=cuda:90 $(PY) -m pytest -n auto $(TRITON_TESTS)
	$(JAX_TESTS) $(PY) -m pytest -n auto -k jax $(addprefix --ignore=,$(TRITON_TESTS))
	$(MAKE) --no-print-directory wheel-check

# What a user installs: build the wheel from a copy of the checkout's files (no stale
# build/ folder can fill in a package setup.py leaves out), install it with its own
# dependencies and torch into a fresh virtual environment, and run tests/wheel_smoke.py
# from a folder outside the checkout with nothing of it on the path: the native API on the
# c backend, a lazyrt.torch training step, `lazyrt doctor`.
WHEEL_CHECK_TMP ?= $(shell mktemp -d -t lazyrt-wheel-check.XXXXXX)

wheel-check: $(STAMP)
	@set -e; tmp="$(WHEEL_CHECK_TMP)"; trap 'rm -rf "$$tmp"' EXIT; \
	echo "wheel-check: building the wheel and installing it into a fresh venv in $$tmp"; \
	mkdir -p "$$tmp/src"; \
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git ls-files -z --cached --others --exclude-standard \
			| tar --null -T - --ignore-failed-read -cf - 2>/dev/null; \
	else tar --exclude=./.venv --exclude=./build --exclude=./dist --exclude='*.egg-info' \
		--exclude='*.so' -cf - .; fi | tar -xf - -C "$$tmp/src"; \
	(cd "$$tmp/src" && "$(abspath $(PY))" -m pip wheel -q --no-deps --no-build-isolation \
		-w "$$tmp/dist" .) >"$$tmp/build.log" 2>&1 || { cat "$$tmp/build.log"; exit 1; }; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install -q --no-compile torch==2.13.0 "$$tmp"/dist/lazyrt-*.whl \
		>"$$tmp/install.log" 2>&1 || { cat "$$tmp/install.log"; exit 1; }; \
	cp tests/wheel_smoke.py "$$tmp/wheel_smoke.py"; \
	cd "$$tmp" && env -u PYTHONPATH -u LAZYRT_BACKEND LAZYRT_CACHE_DIR="$$tmp/cache" \
		"$$tmp/venv/bin/python" wheel_smoke.py

bench: $(STAMP)
	$(PY) -m pip install -q --no-build-isolation -e ".[bench]"
	$(PY) -m bench

clean:
	rm -rf build *.egg-info lazyrt/*.so lazyrt/_recorder.c $(STAMP)
