# Two commands on a fresh machine: `make run` (the demo) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TOOLS_VENV := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.installed

.PHONY: run demo test test-all fuzz bench conformance install clean chromium haproxy typecheck idp

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# Published MCP servers used as outside yardsticks; they pin an older mcp, so they get their own venv.
$(TOOLS_STAMP):
	test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/python -m pip install -q --upgrade pip
	$(TOOLS_VENV)/bin/python -m pip install -q mcp-server-time
	touch $(TOOLS_STAMP)

install: $(STAMP)

# The gateway with the example upstreams and connectors, then the agent host's demo turn
# (scripted model); the gateway keeps serving on http://127.0.0.1:8080/mcp until Ctrl-C.
run: $(STAMP)
	$(BIN)/python examples/run_demo.py

# The same demo, exiting after the agent's turn.
demo: $(STAMP)
	$(BIN)/python examples/run_demo.py --exit-after-demo

# The agent host's browser tests (tests/agent_host/test_browser.py) drive Debian's chromium
# through Playwright; installed here when missing (as root, with apt-get). Without apt-get or
# root this says so and goes on: those tests then skip and say why.
CHROMIUM := /usr/bin/chromium
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "make: no apt-get here: chromium not installed, the browser tests will skip"; \
	elif [ "$$(id -u)" != 0 ]; then echo "make: not root: chromium not installed (apt-get install -y chromium), the browser tests will skip"; \
	else (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) \
	  || echo "make: apt-get could not install chromium: the browser tests will skip"; fi

# The replica tests (tests/replicas/test_load_balanced.py) put Debian's haproxy in front of three
# gateways; installed here when missing, like chromium. Without it those tests skip and say why.
HAPROXY := /usr/sbin/haproxy
haproxy:
	@if [ -x $(HAPROXY) ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "make: no apt-get here: haproxy not installed, the load-balanced replica tests will skip"; \
	elif [ "$$(id -u)" != 0 ]; then echo "make: not root: haproxy not installed (apt-get install -y haproxy), the load-balanced replica tests will skip"; \
	else (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q haproxy) \
	  || echo "make: apt-get could not install haproxy: the load-balanced replica tests will skip"; fi

# The test identity provider (tests/support/idp: oidc-provider, pinned by its package-lock.json), for
# the auth tests; installed again when the lock file changes. tests/support/idp.py installs it too
# when missing; without node/npm those tests skip and say why.
# The MCP TypeScript SDK client of the same tests (tests/support/ts_client) is installed with it.
IDP_DIR := tests/support/idp
TS_CLIENT_DIR := tests/support/ts_client
idp:
	@if ! command -v npm >/dev/null 2>&1; then echo "make: no npm here: the identity provider tests will skip"; \
	else for dir in $(IDP_DIR) $(TS_CLIENT_DIR); do \
	  if [ $$dir/node_modules/.package-lock.json -nt $$dir/package-lock.json ]; then :; \
	  else npm ci --prefix $$dir --no-audit --no-fund --prefer-offline || exit 1; fi; done; fi

# Static types of the gateway and the agent host ([tool.mypy] in pyproject.toml); ~6 s.
typecheck: $(STAMP)
	$(BIN)/python -m mypy gateway agent_host

test: $(STAMP) $(TOOLS_STAMP) chromium haproxy idp typecheck
	$(BIN)/python -m pytest

# Everything, including the slow crash loops (tests marked slow).
test-all: $(STAMP) $(TOOLS_STAMP) chromium haproxy idp
	$(BIN)/python -m pytest -m ''

# The long fuzz of the front's request parsing (tests/fuzz, marker fuzz): FUZZ_EXAMPLES cases
# per strategy family (5 families), randomized; `make fuzz FUZZ_EXAMPLES=5000` for more. The
# figures (requests, failing, statuses, time) are printed at the end.
FUZZ_EXAMPLES ?= 1200
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/fuzz -m ''

bench: $(STAMP)
	$(BIN)/python bench/gateway_overhead.py

# The official MCP conformance suites (0.1.16 and 0.2.0-alpha.12, both requirement sets), directly
# against the reference server and through stateful and stateless gateways (needs node and npm;
# not part of `make test`): conformance/README.md.
conformance: $(STAMP)
	bash conformance/run.sh

clean:
	rm -rf $(VENV) $(TOOLS_VENV) var .pytest_cache .mypy_cache $(IDP_DIR)/node_modules
