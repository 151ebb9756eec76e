# Stockade: `make run` starts a working server, `make test` runs every test.
# Both install what they need first (Debian packages, Go modules), start
# what they need (libvirtd, PostgreSQL) and build the guest image if missing.

SHELL   := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
DATA    ?= $(CURDIR)/var
DEV_EMAIL ?= dev@stockade.local
TEST_TIMEOUT ?= 60m
BENCH_TIMEOUT ?= 45m
# Guest images for tests live outside the checkout so clones share them;
# they are rebuilt only when their inputs change.
export STOCKADE_TEST_DATA_DIR ?= /var/tmp/stockade-test-data

.PHONY: all run test test-short lint fmt generate check-generated build deps services postgres libvirtd image image-test bench bench-usage clean assets

all: build

deps:
	@scripts/deps.sh
	@$(GO) mod download
	@scripts/npm-registry.sh >/dev/null

generate:
	$(GO) tool templ generate -path views

# The generated templ files are committed; fail when they are stale.
check-generated:
	@$(GO) tool templ generate -path views >/dev/null 2>&1
	@if ! git diff --quiet -- views; then \
		echo "views: generated templ files are stale; run 'make generate' and commit" >&2; git --no-pager diff --stat -- views >&2; exit 1; fi

build: generate
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/stockade-agent ./cmd/stockade-agent
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/stockade ./cmd/stockade

libvirtd:
	@scripts/libvirtd.sh

postgres:
	@scripts/postgres.sh >/dev/null

services: libvirtd postgres

# The guest image (kernel, initramfs with the agent, sandbox templates:
# busybox, debian, node, build). Rebuilt only when its inputs changed.
image: build libvirtd
	bin/stockade image build --data-dir $(DATA)

# The templates the tests use (node and build: sandbox/runs' article test).
image-test: build
	bin/stockade image build --data-dir $(STOCKADE_TEST_DATA_DIR) --templates busybox,debian,node,build

run: deps build libvirtd image
	@bin/stockade tenant create demo --name "Demo" --admin $(DEV_EMAIL) --exists-ok --data-dir $(DATA) >/dev/null
	@echo
	@echo "  Stockade: http://$${STOCKADE_ADDR:-127.0.0.1:8080}"
	@if [ -z "$$STOCKADE_OIDC_ISSUER" ]; then \
		echo "  Sign in with the development identity provider as $(DEV_EMAIL) (admin of tenant 'demo', platform operator)."; \
		echo "  Any other email signs in too, as a user without a tenant."; fi
	@echo
	STOCKADE_ADMIN_EMAILS=$${STOCKADE_ADMIN_EMAILS:-$(DEV_EMAIL)} STOCKADE_DATA_DIR=$${STOCKADE_DATA_DIR:-$(DATA)} exec bin/stockade serve

# A second libvirt host for the multi-host tests (qemu+tcp on 127.0.0.1,
# its own mount namespace); without it they start their own.
test: deps check-generated build services image-test
	STOCKADE_TEST_POSTGRES=$$(scripts/postgres.sh) \
	STOCKADE_TEST_LIBVIRT_URI2=$$(scripts/libvirtd-private.sh start /var/tmp/stockade-lvd2 16519) \
		$(GO) test -timeout $(TEST_TIMEOUT) -count=1 ./...
	@$(MAKE) --no-print-directory lint

# Unit and store tests only (no VMs, no browser).
test-short: generate
	$(GO) test -short -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:" >&2; echo "$$out" >&2; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '_templ.go$$')
	$(GO) tool templ fmt views

# Writes bench.log (the whole output), bench-results.json (a list of
# {name, value, unit, baseline, ratio, commit, date}: every figure benchrec
# recorded, each against a baseline measured in the same run) and
# bench-failed.json (failed benchmarks and packages, and the issue's figures
# nothing recorded), and rewrites README.md's bench table from them
# (scripts/benchjson). Fails when anything failed or is missing.
bench: deps build services image-test
	@rc=0; STOCKADE_TEST_POSTGRES=$$(scripts/postgres.sh) \
		$(GO) test -run '^$$' -bench . -benchtime 1x -timeout $(BENCH_TIMEOUT) ./... 2>&1 | tee bench.log; rc=$${PIPESTATUS[0]}; \
	$(GO) run ./scripts/benchjson -o bench-results.json -failed bench-failed.json -require <bench.log || rc=1; \
	$(GO) run ./scripts/benchjson -readme README.md -results bench-results.json -failed bench-failed.json || rc=1; \
	exit $$rc

# The usage export alone (SQLite, 100,000 and 1,000,000 ledger rows): no VMs
# needed. `make bench` runs it too.
bench-usage:
	$(GO) test -run '^$$' -bench BenchmarkExport -benchtime 1x -timeout 20m ./tenants/usage/

assets:
	scripts/assets.sh

clean:
	rm -rf bin
