# walbox: run `make help` for the targets.
GO      ?= go
PKGS    ?= ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Build tags of `make build`: TAGS=otel builds a walbox that exports OpenTelemetry spans
# (--otlp-endpoint); without it, walbox refuses that setting.
TAGS    ?=

# staticcheck is built once, at a pinned version, into the user cache (STATICCHECK names a binary
# to use instead).
STATICCHECK_VERSION := v0.8.2
CACHE_DIR   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/walbox
STATICCHECK ?= $(CACHE_DIR)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

.PHONY: help build test test-compose check tidy chart unit fuzz demo bench soak clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the binaries into bin/ (TAGS=otel: a walbox with tracing)
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

check: $(STATICCHECK) ## gofmt, go mod tidy -diff, go vet, staticcheck (the default build, and walbox with tracing), and the repository checks: docs' size, no tracked binaries
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	cd deploy/helm && $(GO) mod tidy -diff
	$(GO) vet $(PKGS)
	$(GO) vet -tags otel ./cmd/walbox
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags otel ./cmd/walbox
	$(GO) run ./internal/repocheck

tidy: ## go mod tidy, of walbox and of the chart's test module
	$(GO) mod tidy
	cd deploy/helm && $(GO) mod tidy

$(STATICCHECK):
	GOBIN=$(dir $@) GOWORK=off $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

test: check chart ## the full suite: the checks, the chart's tests, and every test (integration tests start their own PostgreSQL and RabbitMQ) with the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

chart: $(STATICCHECK) ## the Helm chart's tests (deploy/helm, a module of its own): vet, staticcheck, helm lint, render, strict decode; the first run builds Helm into the user cache
	cd deploy/helm && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) test -count=1 -timeout 20m ./...

test-compose: ## docker-compose.yml under a Docker engine of the test's own, images built locally and cached (root; about 11 min warm, 17 cold)
	$(GO) vet -tags compose ./internal/composetest/
	$(GO) test -tags compose -count=1 -timeout 70m -v ./internal/composetest/

unit: ## the fast tests only (no servers)
	$(GO) test -race -count=1 -short $(PKGS)

demo: ## run the order/notification demo with throwaway PostgreSQL and RabbitMQ (Ctrl-C stops it)
	$(GO) run ./cmd/demo $(DEMO_ARGS)

bench: ## the benchmark: ceiling, walbox and a polling relay on throwaway servers (about 40 min; BENCH_ARGS to pass flags)
	$(GO) run ./cmd/walbox-bench -wait-load 1.5 $(BENCH_ARGS)

soak: ## the long fault soak: 200 relay kills, long outages, 300,000 rows (about 10 min)
	WALBOX_SOAK=1 $(GO) test -race -count=1 -timeout 3h -v ./internal/faults/ > soak.out 2>&1; rc=$$?; \
	  grep -E 'SUMMARY|^(--- |ok|FAIL|PASS)' soak.out; echo "full output: soak.out"; exit $$rc

fuzz: ## fuzz the decoder for a while (FUZZTIME, default 2m)
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $${FUZZTIME:-2m} ./decoder/

clean: ## remove build output
	rm -rf bin/
