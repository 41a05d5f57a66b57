# jupyter-gpuhive — the two commands: `make demo` and `make test`.
# Both set everything up themselves on a fresh Debian machine with Python 3.11.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# System packages the tests use (real PostgreSQL, real sshd, real GNU screen).
APT_PACKAGES := postgresql postgresql-contrib openssh-server openssh-client screen procps

.PHONY: demo test lint format sysdeps venv bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

venv: $(STAMP)

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
	$(BIN)/ruff check jupyter_gpuhive tests benchmarks
	$(BIN)/ruff format --check jupyter_gpuhive tests benchmarks
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format jupyter_gpuhive tests benchmarks
	$(BIN)/ruff check --fix jupyter_gpuhive tests benchmarks

test: sysdeps $(STAMP) lint
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/python -m jupyter_gpuhive.demo

bench: sysdeps $(STAMP)
	$(BIN)/python benchmarks/reservations.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache
