# Two commands on a fresh machine: `make run` (the demo) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TOOLS_VENV := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.installed

.PHONY: run demo test test-all bench conformance install clean

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

test: $(STAMP) $(TOOLS_STAMP)
	$(BIN)/python -m pytest

# Everything, including the slow crash loops (tests marked slow).
test-all: $(STAMP) $(TOOLS_STAMP)
	$(BIN)/python -m pytest -m ''

bench: $(STAMP)
	$(BIN)/python bench/gateway_overhead.py

conformance: $(STAMP)
	bash conformance/run.sh

clean:
	rm -rf $(VENV) $(TOOLS_VENV) var .pytest_cache
