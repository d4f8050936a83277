# walbox: run `make help` for the targets.
GO      ?= go
PKGS    ?= ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: help build test check unit fuzz demo bench soak clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build the binaries into bin/
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

check: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

test: check ## the full suite: gofmt, vet, and every test (integration tests start their own PostgreSQL and RabbitMQ) with the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

unit: ## the fast tests only (no servers)
	$(GO) test -race -count=1 -short $(PKGS)

demo: ## run the order/notification demo with throwaway PostgreSQL and RabbitMQ (Ctrl-C stops it)
	$(GO) run ./cmd/demo $(DEMO_ARGS)

fuzz: ## fuzz the decoder for a while (FUZZTIME, default 2m)
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $${FUZZTIME:-2m} ./decoder/

clean: ## remove build output
	rm -rf bin/
