# wsgate: the targets a developer and CI use.
GO ?= go
PKGS ?= ./...

.PHONY: test demo graph bench bench-tls bench-h2attack lint fuzz build proto deps

# test runs every test with the race detector, in random order. The
# integration tests start a real redis-server; deps installs it if missing.
# The tunnel package runs twice more: on its goroutine engine, and with its
# clients over TLS 1.3 (their records run by the pollers, as the TLS
# listener's are); the gateway's HTTP/2 node tests run again on the
# goroutine engine, which carries a TLS 1.2 client's tunnel to an HTTP/2
# node (TestClientH2*, a client's
# streams over HTTP/2, run on that engine in every run), and the HTTP/2
# client's with its connections read the way a poller reads them.
# Every run goes ahead whatever the ones before it gave, so each
# package's result is reported; then the runs that failed are listed
# and make fails.
TESTFLAGS = -race -shuffle=on -count=1
TEST_RUNS = \
	"$(GO) test $(TESTFLAGS) -timeout 12m $(PKGS)" \
	"WSGATE_TUNNEL_ENGINE=goroutines $(GO) test $(TESTFLAGS) ./gateway/internal/tunnel" \
	"WSGATE_TUNNEL_ENGINE=goroutines $(GO) test $(TESTFLAGS) -run '^TestH2' ./gateway" \
	"WSGATE_H2_POLL=1 $(GO) test $(TESTFLAGS) ./gateway/internal/upstream/h2" \
	"WSGATE_TUNNEL_TLS=1 $(GO) test $(TESTFLAGS) ./gateway/internal/tunnel"
test: deps
	@failed=""; \
	for run in $(TEST_RUNS); do \
		echo "$$run"; \
		eval "$$run" || failed="$$failed	$$run\n"; \
	done; \
	if [ -n "$$failed" ]; then printf 'make test: these runs failed:\n%b' "$$failed" >&2; exit 1; fi

# demo runs the gateway in front of two in-process relay replicas.
demo:
	$(GO) run ./cmd/wsgate-demo

# graph redraws the package graph of docs/architecture.md from go list
# (internal/deprules's test fails while it is out of date).
graph:
	$(GO) run ./internal/deprules/graph

# bench builds wsgate, relay-backend and wsload, starts redis, two relays,
# the gateway, nginx and HAProxy on 127.0.0.1, runs fixed wsload scenarios
# direct and through each proxy, and prints one table (docs/benchmarks.md).
# About 10 minutes; BENCH_QUICK=1 runs a reduced set in about 2.5. As root it
# installs the peers from Debian's packages when missing (nginx-light
# provides nginx); otherwise their columns read n/a.
BENCH_PEERS = nginx haproxy
bench:
	@missing=""; for p in $(BENCH_PEERS); do command -v $$p >/dev/null 2>&1 || [ -x /usr/sbin/$$p ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		pkgs=$$(echo "$$missing" | sed 's/nginx/nginx-light/'); \
		if [ "$$(id -u)" = 0 ]; then echo "bench: installing$$pkgs from Debian's packages" >&2; \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null; } || \
			echo "bench: could not install$$pkgs; their columns will read n/a" >&2; \
		else echo "bench: missing$$missing and not root; their columns will read n/a (sudo apt-get install -y$$pkgs)" >&2; fi; fi
	$(GO) run ./bench/cmd/benchrun

# bench-tls compares wsgate's TLS termination with nginx's (ssl listener),
# each on one core in front of one relay: RSS per idle TLS tunnel (2,000
# wss connections) and full TLS 1.3 handshakes per second with the proxy's
# CPU per handshake; then WebSockets over HTTP/2 (wsgate with h2, HAProxy
# with alpn h2,http/1.1) against a TLS connection each (wsgate, nginx):
# RSS per idle WebSocket and WebSocket opens per second (docs/benchmarks.md).
# About four minutes; needs nginx (nginx-light) and haproxy for their rows.
# TLSBENCH_FLAGS passes flags (-idle, -workers, -duration, -reps, -h2-conns,
# -h2-streams, -h2-workers).
bench-tls:
	$(GO) run ./bench/cmd/tlsbench $(TLSBENCH_FLAGS)

# bench-h2attack re-runs the attacks on the HTTP/2 paths (a node's PING and
# SETTINGS floods, slow request bodies, client SETTINGS and WINDOW_UPDATE
# floods, rapid reset) against a fresh wsgate each, with WebSocket echo
# clients (or GETs) over HTTP/2 measured before and during each: their p50
# and p99, delivered share, the gateway's peak RSS and CPU, what the
# attacker got (docs/benchmarks.md, "HTTP/2 attacks"). About three minutes.
# H2ATTACK_FLAGS passes flags (-attacks, -reps, -baseline, -duration, ...).
bench-h2attack:
	$(GO) run ./bench/cmd/h2attack $(H2ATTACK_FLAGS)

# lint checks formatting, refuses tracked executables (an ELF file, or an
# executable bit without a #! line: build outputs go to bin/, ignored),
# vets the code and runs staticcheck (pinned; fetched through the Go
# module proxy on first use). No check is excluded.
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@bad=$$(git ls-files -s | while read -r mode _ _ f; do \
		magic=$$(head -c 4 "$$f" | od -An -tx1 | tr -d ' \n'); \
		if [ "$$magic" = 7f454c46 ]; then echo "$$f"; \
		elif [ "$$mode" = 100755 ] && [ "$$(head -c 2 "$$f")" != '#!' ]; then echo "$$f"; fi; done); \
	if [ -n "$$bad" ]; then echo "tracked executables (build outputs belong in bin/, ignored):"; echo "$$bad"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# fuzz runs every fuzz target of the module (one per parser) for FUZZTIME.
# A count budget: on Go 1.26 a time budget can end in a spurious
# "context deadline exceeded" (golang/go#75804).
FUZZTIME ?= 300000x
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# build puts wsgate, relay-backend, wsload and the example auth plugins
# into bin/. -buildvcs=auto stamps the commit into the binaries (what
# `wsgate -version` and wsgate_build_info report) even where GOFLAGS turns
# stamping off; outside a git checkout it stamps nothing and does not fail.
BUILDFLAGS ?= -buildvcs=auto
build:
	$(GO) build $(BUILDFLAGS) -o bin/wsgate ./cmd/wsgate
	$(GO) build $(BUILDFLAGS) -o bin/relay-backend ./relay-backend
	$(GO) build $(BUILDFLAGS) -o bin/wsload ./cmd/wsload
	$(GO) build $(BUILDFLAGS) -o bin/plugins/jwt ./plugins/jwt
	$(GO) build $(BUILDFLAGS) -o bin/plugins/apikey ./plugins/apikey

# proto regenerates the auth plugin contract's gRPC code (needs protoc from
# Debian's protobuf-compiler; the generators are installed at pinned
# versions by the script).
proto:
	bash plugins/auth/proto/gen.sh

# deps installs what the tests run from Debian's packages when it is missing
# (as root): redis-server for the integration tests, chromium for the
# dashboard test, pebble (Let's Encrypt's test CA, with
# pebble-challtestsrv) for the ACME tests, and openssl and curl, which the
# test of docs/operations.md's Pebble steps runs as the doc does. The ACME
# tests skip without pebble unless WSGATE_REQUIRE_PEBBLE is set (CI). And
# h2spec, the HTTP/2 conformance suite the gateway's TLS listener and
# relay-backend are held to (internal/h2spectest), at its pinned version
# into bin/ with go install (not a dependency of the module); its tests
# skip without it unless WSGATE_REQUIRE_H2SPEC is set (CI).
DEPS = redis-server chromium pebble openssl curl
H2SPEC = github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
deps:
	@[ -x bin/h2spec ] || GOBIN="$(CURDIR)/bin" $(GO) install $(H2SPEC)
	@missing=""; for p in $(DEPS); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else echo "missing:$$missing (sudo apt-get install$$missing)" >&2; exit 1; fi; fi
