# wsgate: the targets a developer and CI use.
GO ?= go
PKGS ?= ./...

.PHONY: test demo bench lint fuzz build deps

# test runs every test with the race detector, in random order. The
# integration tests start a real redis-server; deps installs it if missing.
test: deps
	$(GO) test -race -shuffle=on -count=1 -timeout 12m $(PKGS)

# demo runs the gateway in front of two in-process relay replicas.
demo:
	$(GO) run ./cmd/wsgate demo

# bench runs the hot-path benchmarks (frame scanner, balancer).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/wsframe ./balancer

# lint checks formatting and vets the code.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# fuzz runs each parser's fuzz target for FUZZTIME.
# A count budget: on Go 1.26 a time budget can end in a spurious
# "context deadline exceeded" (golang/go#75804).
FUZZTIME ?= 300000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeader$$' -fuzztime $(FUZZTIME) ./internal/wsframe
	$(GO) test -run '^$$' -fuzz '^FuzzScanner$$' -fuzztime $(FUZZTIME) ./internal/wsframe
	$(GO) test -run '^$$' -fuzz '^FuzzParseClosePayload$$' -fuzztime $(FUZZTIME) ./internal/wsframe
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./conf
	$(GO) test -run '^$$' -fuzz '^FuzzRouteMatch$$' -fuzztime $(FUZZTIME) ./gateway

# build puts wsgate and relay-backend into bin/.
build:
	$(GO) build -o bin/wsgate ./cmd/wsgate
	$(GO) build -o bin/relay-backend ./relay-backend

# deps installs redis-server from Debian's packages when it is missing (as
# root); the integration tests need it.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; \
		else echo "redis-server is missing: sudo apt-get install redis-server" >&2; exit 1; fi; }
