# jupyter-gpuhive — the two commands: `make demo` and `make test`.
# Both set everything up themselves on a fresh Debian machine with Python 3.11.

PYTHON ?= python3
comma  := ,
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# System packages the tests use (real PostgreSQL, real sshd, real GNU screen, Chromium for the UI tests,
# libfaketime for make test-dates, Prometheus for tests/api/test_prometheus.py, docker.io for the
# container tests: tests/support/containers.py starts its own dockerd; rootless podman as a test user;
# Slurm and munge for tests/slurm/: tests/support/slurm.py starts its own cluster).
APT_PACKAGES := postgresql postgresql-contrib openssh-server openssh-client screen procps chromium nftables faketime libfaketime prometheus haproxy docker.io podman uidmap slirp4netns slurmctld slurmd slurm-client munge
# JupyterLab extension (labextension/): node_modules cached by a stamp, rebuilt when its sources change.
LABEXT       := labextension
LABEXT_STAMP := $(LABEXT)/node_modules/.installed
LABEXT_BUILT := jupyter_gpuhive/labextension/package.json
JLPM         := PATH="$(CURDIR)/$(BIN):$$PATH" "$(CURDIR)/$(BIN)/jlpm"

.PHONY: demo test test-corpus lint format sysdeps venv bench bench-smoke clean labextension test-js test-ui binder-check

# configurable-http-proxy (npm) for the JupyterHub team-mode tests (tests/hub), in a local prefix.
CHP_PREFIX := $(VENV)/node
CHP_STAMP  := $(CHP_PREFIX)/.installed
export GPUHIVE_CHP := $(CURDIR)/$(CHP_PREFIX)/node_modules/.bin/configurable-http-proxy

# Every Python dependency, transitive ones and the build's included, is pinned by $(LOCK) (uv pip
# compile; docs/development.md). The venv installs exactly that: PIP_CONSTRAINT reaches pip's isolated
# build environment too, so the package's own build uses the locked hatchling. The labextension is
# built by its own target below (the Python install never runs Node). `make lock` rewrites it;
# `make test-latest` tries the newest versions pyproject.toml allows, on purpose.
LOCK    := requirements/lock.txt
EXTRAS  := test,dev,docs,bench,hub,postgresql,lab
LOCK_PY := 3.11

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	PIP_CONSTRAINT=$(CURDIR)/$(LOCK) $(BIN)/python -m pip install --quiet pip
	PIP_CONSTRAINT=$(CURDIR)/$(LOCK) SKIP_JUPYTER_BUILDER=1 $(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

# Rewrites the lock from pyproject.toml and requirements/build.in with uv (from the venv). torch is
# kept as the plain release: pip takes the CPU build from this machine's disk, or the release from PyPI.
.PHONY: lock
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml requirements/build.in --upgrade $(foreach e,$(subst $(comma), ,$(EXTRAS)),--extra $(e)) \
	  --python-version $(LOCK_PY) --python-platform x86_64-manylinux_2_28 --allow-unsafe --no-emit-find-links $(if $(wildcard /opt/wheels),--find-links /opt/wheels) \
	  --no-header --annotation-style line -q -o $(LOCK)
	sed -i -E 's/^(torch==[^+ ]+)\+cpu/\1/' $(LOCK)

# The suite against the newest versions pyproject.toml allows (no lock), in a venv of its own. When it
# finds drift: fix it, then `make lock`, and commit both together.
.PHONY: test-latest
LATEST := $(VENV)-latest
test-latest: sysdeps
	rm -rf $(LATEST) && $(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	SKIP_JUPYTER_BUILDER=1 $(LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[$(EXTRAS)]'
	$(LATEST)/bin/python -m pip list --format=freeze > $(LATEST)/versions.txt
	@echo "newest versions: $(LATEST)/versions.txt"
	$(LATEST)/bin/python -m pytest -q -x -p no:cacheprovider

venv: $(STAMP) $(CHP_STAMP)

$(CHP_STAMP): $(STAMP)
	npm install --prefix $(CHP_PREFIX) --no-audit --no-fund --loglevel=error configurable-http-proxy@5
	touch $@

$(LABEXT_STAMP): $(STAMP) $(LABEXT)/package.json $(LABEXT)/yarn.lock
	cd $(LABEXT) && $(JLPM) install --immutable
	touch $@

# Builds into jupyter_gpuhive/labextension, then reinstalls (no JS rebuild) so the venv's
# share/jupyter/labextensions/jupyter-gpuhive holds this build.
$(LABEXT_BUILT): $(wildcard $(LABEXT)/src/*.ts $(LABEXT)/style/*) $(LABEXT)/tsconfig.json $(LABEXT)/package.json | $(LABEXT_STAMP)
	cd $(LABEXT) && $(JLPM) build:prod
	SKIP_JUPYTER_BUILDER=1 $(BIN)/python -m pip install --quiet --no-deps -e .

labextension: $(LABEXT_BUILT)

# Jest unit tests of the panel's model code.
test-js: $(LABEXT_STAMP)
	cd $(LABEXT) && $(JLPM) test

# Playwright UI tests on Debian's chromium; screenshots in labextension/ui-tests/artifacts/.
test-ui: sysdeps $(LABEXT_BUILT)
	cd $(LABEXT) && $(JLPM) test:ui

# Installs the system packages the tests need, when run as root and they are missing.
sysdeps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing system packages:$$missing (run 'sudo make sysdeps')"; exit 1; \
	  fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check jupyter_gpuhive tests benchmarks packaging
	$(BIN)/ruff format --check jupyter_gpuhive tests benchmarks packaging
	$(BIN)/mypy
	$(BIN)/python -m jupyter_gpuhive.server.api.typescript --check $(LABEXT)/src/api-types.ts

format: $(STAMP)
	$(BIN)/ruff format jupyter_gpuhive tests benchmarks
	$(BIN)/ruff check --fix jupyter_gpuhive tests benchmarks

test: sysdeps $(STAMP) $(CHP_STAMP) lint docs dist test-js test-ui test-schemathesis bench-smoke
	$(BIN)/python -m pytest -q --durations=25
	$(MAKE) --no-print-directory test-dates

# The date- and time-sensitive tests again, with the clock faked (libfaketime) to each DST change of
# the site zone, 31 December 23:59, 29 February, a Sunday 23:30 and now (tests/dates.py lists them).
.PHONY: test-dates
test-dates: sysdeps $(STAMP)
	$(BIN)/python -m tests.dates

# `make test` of a clean clone (HEAD) on a brand-new Debian machine: a container from a
# debootstrap root file system with nothing of this machine's state (tests/fresh/run.sh).
# About 21 min (it doubles a CI run, so it is not part of `make test`); run it before an
# issue is resolved.
.PHONY: test-fresh
test-fresh:
	bash tests/fresh/run.sh

# The kernel guard, authorization (every route through @authorized) and kernel tests against the
# oldest jupyter_server the package claims (pyproject's lower bound; no JupyterLab: the oldest the
# Lab extension is built for, 4.6.6, itself needs jupyter_server 2.19) and the newest released
# with the newest JupyterLab, each in
# its own venv under $(VENV)/compat/. About 6½ minutes on the 2-core development machine, most of
# it the kernel tests: not part of `make test`.
COMPAT_OLDEST := jupyter_server==2.16.0
COMPAT_NEWEST := jupyter_server jupyterlab
COMPAT_TESTS  := tests/test_extension_points.py tests/test_app.py tests/api/test_api_auth.py \
                 tests/api/test_authorization.py \
                 tests/test_kernel_env.py tests/kernels
.PHONY: test-compat
test-compat: sysdeps $(STAMP)
	@set -e; for which in oldest newest; do \
	  if [ $$which = oldest ]; then pins="$(COMPAT_OLDEST)"; else pins="$(COMPAT_NEWEST)"; fi; \
	  venv=$(VENV)/compat/$$which; rm -rf $$venv; $(PYTHON) -m venv $$venv; \
	  SKIP_JUPYTER_BUILDER=1 $$venv/bin/python -m pip install --quiet --upgrade $$pins -e . \
	    'pytest>=8' 'pytest-jupyter[server]>=0.9' pytest-timeout 'psycopg[binary]>=3.1'; \
	  echo "== $$which: $$($$venv/bin/python -m pip list 2>/dev/null | grep -iE '^(jupyter_server|jupyterlab|jupyter_client|tornado|traitlets) ' | tr -s ' ' | paste -sd ',')"; \
	  GPUHIVE_TEST_DATABASES=sqlite $$venv/bin/python -m pytest -q -p no:cacheprovider $(COMPAT_TESTS); \
	done

# The OpenAPI document against the server: schemathesis (--checks all, fixed seed) as a user and
# as an admin, on a real server with simulated hosts and SQLite (tests/api/schemathesis_run.py).
.PHONY: test-schemathesis
test-schemathesis: $(STAMP)
	$(BIN)/python -m tests.api.schemathesis_run

# The documentation site (docs/, Sphinx + MyST): warnings are errors, and the reference pages
# are written from the live objects first (docs/_ext/gpuhive_reference). linkcheck checks the
# internal targets only (conf.py skips http(s): the machines are offline).
DOCS_OUT := docs/_build
.PHONY: docs docs-screenshots
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html -d $(DOCS_OUT)/doctrees docs $(DOCS_OUT)/html
	$(BIN)/sphinx-build -W --keep-going -q -b linkcheck -d $(DOCS_OUT)/doctrees docs $(DOCS_OUT)/linkcheck
	@echo "docs: $(DOCS_OUT)/html/index.html"

# The docs' screenshots, from the UI tests' artifacts (never edited by hand): runs the UI
# tests, then copies the pictures the docs show into docs/_static/screenshots/.
# 09-violation (violations.spec.ts) is the sidebar of the index, the README and the demo tutorial;
# 40-sidebar-12 and 41-sidebar-32 (scale.spec.ts) the sidebar at the demo's size and at 32 GPUs.
DOCS_SHOTS := 01-panel 06-dark 09-violation 11-calendar 12-overview 13-dashboard 16-job-builder 17-job-builder-dark 18-calendar-12 19-calendar-64 40-sidebar-12 41-sidebar-32
docs-screenshots: test-ui
	mkdir -p docs/_static/screenshots
	for s in $(DOCS_SHOTS); do cp $(LABEXT)/ui-tests/artifacts/screenshots/$$s.png docs/_static/screenshots/; done

# The sdist and wheel (with the prebuilt labextension), built from the tree with the locked build
# tools, then checked: twine, the wheel installed with its `lab` extra in a clean venv, the server
# and lab extensions listed as enabled, `jupyter lab` serving gpuhive (packaging/check_dist.py).
.PHONY: dist
dist: $(STAMP) $(LABEXT_BUILT)
	rm -rf dist
	PIP_CONSTRAINT=$(CURDIR)/$(LOCK) $(BIN)/python -m build --sdist --wheel --outdir dist . > /dev/null
	$(BIN)/python packaging/check_dist.py

demo: $(STAMP) $(LABEXT_BUILT)
	$(BIN)/python -m jupyter_gpuhive.cli.demo

# Binder as repo2docker builds it, as far as this machine allows (see binder/check_build.py):
# a fresh copy, a clean venv from environment.yml, postBuild, start, as a non-root user.
binder-check: sysdeps
	$(PYTHON) binder/check_build.py

bench: sysdeps $(STAMP) $(CHP_STAMP)
	$(BIN)/python benchmarks/reservations.py

# Every benchmark (benchmarks/*.py but the fixtures) at its --smoke size, two at a time:
# fails on a crash, a non-zero exit, a last line that is not one JSON object, or a null figure
# in it (tests/support/bench_smoke.py). About 2-3 minutes on the 2-core development machine.
bench-smoke: sysdeps $(STAMP) $(CHP_STAMP)
	$(BIN)/python -m tests.support.bench_smoke

# Every vendor's parsers over every real output of ../shared/smi-corpus (tests/corpus/check.py);
# a clone without ../shared is told so and passes.
test-corpus: $(STAMP)
	$(BIN)/python -m tests.corpus.check ../shared/smi-corpus

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache docs/_build
	rm -rf $(LABEXT)/node_modules $(LABEXT)/lib $(LABEXT)/tsconfig.tsbuildinfo $(LABEXT)/ui-tests/artifacts jupyter_gpuhive/labextension
