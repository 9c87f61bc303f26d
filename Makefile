# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: bench run test lint typecheck unit e2e-bins lock clean protos go-client graphql-schema chromium audit-deps generate schemas grpc-recipes buf-check buf-release client-recipes

$(STAMP): pyproject.toml demo/pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]' -e ./demo
	touch $@

## run: serve GraphQL (:8080) and gRPC (:50051) against the current kubeconfig, or the demo upstream
run: $(STAMP)
	$(BIN)/kube-gateway serve $(ARGS)

## test: install everything, lint, type-check and run the whole suite (real kube-apiserver included)
test: $(STAMP) e2e-bins chromium go-client audit-deps grpc-recipes client-recipes
	$(BIN)/ruff check gateway demo tests scripts
	$(BIN)/ruff format --check gateway demo tests scripts
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider --durations=25 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check gateway demo tests scripts
	$(BIN)/ruff format --check gateway demo tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

## unit: the fast suite only (no real apiserver)
unit: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m "not e2e" $(PYTEST_ARGS)

## e2e-bins: build (or reuse) kube-apiserver, etcd and kustomize for the end-to-end suite
e2e-bins:
	bash tests/e2e/build.sh

## generate: run every generator (schema extraction, protos and their stubs, the SDL); the
## contract tests fail when a committed output drifts from what these write
generate: schemas protos graphql-schema

## schemas: extract the Kubernetes definitions of the registry's kinds and the demo's
schemas: $(STAMP)
	$(BIN)/python scripts/extract_schemas.py

## graphql-schema: export the GraphQL SDL (the public contract) to graphql_schema/schema.graphql
graphql-schema: $(STAMP)
	$(BIN)/python -m gateway.graphql graphql_schema/schema.graphql

## audit-deps: the pinned npm clients the GraphQL tests drive (tests/graphql-http): the
## GraphQL-over-HTTP audit, meros and graphql-sse (installed when one is missing or another version)
AUDIT_DEPS_OK = const p = require("./package.json"); for (const [n, v] of Object.entries(p.dependencies)) if (require("./node_modules/" + n + "/package.json").version !== v) process.exit(1)
audit-deps:
	cd tests/graphql-http && (node -e '$(AUDIT_DEPS_OK)' 2>/dev/null || npm ci --no-audit --no-fund --loglevel=error)

## client-recipes: the pinned npm packages of the GraphQL client recipes (examples/graphql:
## Apollo Client, urql, graphql-ws, graphql-sse, graphql-codegen and TypeScript), installed
## when one is missing or another version
client-recipes:
	cd examples/graphql && (node -e '$(AUDIT_DEPS_OK)' 2>/dev/null || npm ci --no-audit --no-fund --loglevel=error)

## chromium: Debian's headless browser for the GraphiQL test (installed only when missing)
chromium:
	test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

## protos: regenerate protos/ from the schema (numbers kept in protos/field_numbers.json) and the Python stubs
protos: $(STAMP)
	$(BIN)/python -m gateway.grpc.protogen

## go-client: build (or reuse) the Go example client of the gRPC API and grpcurl (tests/go-client/.bin)
go-client: $(STAMP)
	bash tests/go-client/build.sh

## grpc-recipes: build (or reuse) buf and the gRPC client recipes of examples/grpc (Go, Python,
## Java); Maven and Debian's grpc-java protoc plugin are installed when missing
grpc-recipes: $(STAMP)
	test -x /usr/bin/mvn -a -x /usr/bin/grpc_java_plugin || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven protobuf-compiler-grpc-java-plugin)
	bash examples/grpc/build.sh

## buf-check: `buf lint` and `buf breaking` against the last release (protos/released.binpb), as `make test` runs them
buf-check:
	bash examples/grpc/build.sh buf
	cd protos && ../examples/grpc/.bin/buf lint && ../examples/grpc/.bin/buf breaking --against released.binpb

## buf-release: at a release, freeze today's contract as the baseline `buf breaking` compares with (commit it)
buf-release:
	bash examples/grpc/build.sh buf
	cd protos && ../examples/grpc/.bin/buf build --exclude-source-info -o released.binpb

## bench: one table of the benchmarks (ratios against a direct upstream call in the same run; not tests), written to BENCHMARKS.md
bench: $(STAMP) go-client e2e-bins
	$(BIN)/python -m tests.bench

## lock: re-resolve pinned versions after changing dependencies
lock:
	rm -rf /tmp/kg-lock && $(PYTHON) -m venv /tmp/kg-lock
	/tmp/kg-lock/bin/pip install --quiet '.[dev]' ./demo
	/tmp/kg-lock/bin/pip freeze --exclude-editable | grep -v '^kube-gateway' > requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
