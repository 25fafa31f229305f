# headwater: the commands every checkout provides (see ../shared/DESIGN.md).
#   make test    set up what is missing (Debian packages, .venv) and run lint, types and tests
#   make bench   every benchmark (BENCH_ARGS=--quick for the short versions)
#   make demo    the main job on an embedded default

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JDBC_JAR := /usr/share/java/mariadb-java-client.jar
# Browser tests (pytest -m browser): Debian's chromium driven by playwright-core from npm,
# installed into this git-ignored directory.
BROWSER_DIR := .browser
PLAYWRIGHT := $(BROWSER_DIR)/node_modules/playwright-core/package.json

.PHONY: test lint typecheck unit integration bench setup system-packages clean demo

setup: system-packages $(STAMP) $(PLAYWRIGHT)

# Debian packages, installed only when their programs are missing (needs root, as on CI).
system-packages:
	@missing=""; \
	command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing="$$missing mariadb-server"; \
	command -v mariadb-binlog >/dev/null 2>&1 || missing="$$missing mariadb-client"; \
	command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	[ -f $(JDBC_JAR) ] || missing="$$missing libmariadb-java"; \
	command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing="$$missing nats-server"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	[ -x /usr/share/zookeeper/bin/zkServer.sh ] || missing="$$missing zookeeper"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(STAMP): pyproject.toml setup.py $(wildcard src/headwater/_native/*.c)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

$(PLAYWRIGHT):
	npm install --silent --no-save --no-audit --no-fund --prefix $(BROWSER_DIR) playwright-core@1.65.1

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

test: setup lint typecheck
	$(BIN)/pytest

unit: $(STAMP)
	$(BIN)/pytest -m "not integration"

integration: setup
	$(BIN)/pytest -m integration

bench: setup
	@# (modules the benchmarks share, such as bench/proccpu.py, have no __main__ and are skipped)
	@for b in $$(grep -l '__name__ == "__main__"' bench/*.py); do echo "== $$b"; $(BIN)/python $$b $(BENCH_ARGS) || exit 1; done

demo: setup
	$(BIN)/headwater demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
