# walbox: run `make help` for the targets.
GO      ?= go
PKGS    ?= ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Build tags of `make build`: TAGS=otel builds walbox from the otel module, a walbox that exports
# OpenTelemetry spans (--otlp-endpoint); without it, walbox refuses that setting.
TAGS    ?=

# The repository's Go modules: walbox (the product), test (the harness: fault suite, end-to-end
# suites, benchmark, compose harness), examples (the demo, the orders and notifier services) and
# otel (the tracing package and the walbox built with it, so OpenTelemetry stays out of the
# product's go.mod). Each has its own go.mod; the others replace walbox by this folder.
MODULES := . test examples otel

# staticcheck is built once, at a pinned version, into the user cache (STATICCHECK names a binary
# to use instead).
STATICCHECK_VERSION := v0.8.2
CACHE_DIR   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/walbox
STATICCHECK ?= $(CACHE_DIR)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

.PHONY: help build test test-compose check tidy chart unit fuzz demo bench soak clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the binaries into bin/ (TAGS=otel: a walbox with tracing): walbox, and the examples' and the benchmark's commands
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...
	$(if $(filter otel,$(TAGS)),cd otel && $(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o ../bin/ ./cmd/walbox)
	cd examples && $(GO) build -o ../bin/ ./cmd/...
	cd test && $(GO) build -o ../bin/ ./cmd/...

check: $(STATICCHECK) ## gofmt, go mod tidy -diff, go vet, staticcheck (every module, otel too; the compose harness with its tag), and the repository checks: docs' size, no tracked binaries
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES) deploy/helm; do echo "go mod tidy -diff in $$m"; (cd $$m && $(GO) mod tidy -diff); done
	@set -e; for m in $(MODULES); do echo "go vet and staticcheck in $$m"; \
	  (cd $$m && $(GO) vet $(PKGS) && $(STATICCHECK) $(PKGS)); done
	cd test && $(GO) vet -tags compose ./composetest/
	$(GO) run ./internal/repocheck

tidy: ## go mod tidy, of every module: walbox, test, examples, otel and the chart's test module
	@set -e; for m in $(MODULES) deploy/helm; do (cd $$m && $(GO) mod tidy); done

$(STATICCHECK):
	GOBIN=$(dir $@) GOWORK=off $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The modules' tests run side by side: much of their time is spent waiting on servers.
# test/faults, the longest package, runs as two processes: the top-level tests FAULTS_HALF
# matches, and the others. Each process starts servers of its own. Each job's output is
# printed when it ends.
FAULTS      := github.com/walbox/walbox/test/faults
FAULTS_HALF ?= ^Test([A-LN-Q]|Rec)

test: check chart ## the full suite: the checks, the chart's tests, and every test of every module (integration tests start their own PostgreSQL and RabbitMQ) with the race detector
	@dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; n=0; \
	  job() { n=$$((n+1)); m=$$1; echo "go test in $$m: $$2"; shift 2; \
	    (cd $$m && $(GO) test -race -count=1 -timeout 50m "$$@" > "$$dir/$$n" 2>&1; \
	      echo $$? > "$$dir/$$n.rc"; cat "$$dir/$$n") & }; \
	  for m in $(MODULES); do \
	    pkgs=$$(cd $$m && $(GO) list $(PKGS)) || { wait; exit 1; }; \
	    rest=$$(echo "$$pkgs" | grep -vx '$(FAULTS)'); \
	    if [ "$$rest" != "$$pkgs" ]; then \
	      job $$m "test/faults, the tests $(FAULTS_HALF) matches" -run '$(FAULTS_HALF)' $(FAULTS); \
	      job $$m "test/faults, the others" -skip '$(FAULTS_HALF)' $(FAULTS); \
	    fi; \
	    if [ -n "$$rest" ]; then job $$m "$(PKGS)" $$rest; fi; \
	  done; wait; \
	  rc=0; for i in $$(seq $$n); do [ "$$(cat "$$dir/$$i.rc")" = 0 ] || rc=1; done; exit $$rc

chart: $(STATICCHECK) ## the Helm chart's tests (deploy/helm, a module of its own): vet, staticcheck, helm lint, render, strict decode; the first run builds Helm into the user cache
	cd deploy/helm && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) test -count=1 -timeout 20m ./...

test-compose: ## docker-compose.yml under a Docker engine of the test's own, images built locally and cached (root; about 11 min warm, 17 cold)
	cd test && $(GO) vet -tags compose ./composetest/
	cd test && $(GO) test -tags compose -count=1 -timeout 70m -v ./composetest/

unit: ## the fast tests only (no servers), of every module
	@rc=0; for m in $(MODULES); do (cd $$m && $(GO) test -race -count=1 -short $(PKGS)) || rc=1; done; exit $$rc

demo: ## run the order/notification demo with throwaway PostgreSQL and RabbitMQ (Ctrl-C stops it)
	cd examples && $(GO) run ./cmd/demo $(DEMO_ARGS)

bench: ## the benchmark: ceiling, walbox and a polling relay on throwaway servers (about 40 min; BENCH_ARGS to pass flags)
	cd test && $(GO) build -o ../bin/walbox-bench ./cmd/walbox-bench
	bin/walbox-bench -wait-load 1.5 $(BENCH_ARGS)

soak: ## the long fault soak: 2,000 kills at kill points, 200 at random moments, long outages, 300,000 rows, the seam matrix, 200,000 messages through partitioned consumers, 100,000 scheduled messages over 10 minutes; one summary table (about 80 min on two busy cores, and the consumers' part)
	cd test && WALBOX_SOAK=1 $(GO) test -race -count=1 -timeout 3h -v ./faults/ > ../soak.out 2>&1; rc=$$?; \
	  cd .. && WALBOX_SOAK=1 $(GO) test -race -count=1 -timeout 2h -v -run TestPartitionsSurviveKillsAndFailures ./consumer/ >> soak.out 2>&1 || rc=1; \
	  grep -E 'SUMMARY|^SOAK |^(--- |ok|FAIL|PASS)' soak.out; echo "full output: soak.out"; exit $$rc

fuzz: ## fuzz the decoder for a while (FUZZTIME, default 2m)
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $${FUZZTIME:-2m} ./decoder/

clean: ## remove build output
	rm -rf bin/
