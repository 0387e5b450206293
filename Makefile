# pagelog: `make run` runs the demo, `make test` runs every test.
GO       ?= go
FUZZTIME ?= 60s
BIN      := bin/pagelog

.PHONY: all build run test unit fmt-check vet deps race bench bench-peers bench-compare fuzz fuzz-smoke crash-long clean cross cross-quick test-cross test-cross-quick

all: build

build:
	$(GO) build -o $(BIN) ./cmd/pagelog

# One node of a replicated queue, which `bin/pagelog serve --raft` runs: it is
# built from the raftstore module (hashicorp/raft stays out of go.mod).
.PHONY: raft
raft:
	$(GO) build -C raftstore -o $(CURDIR)/bin/pagelog-raft ./cmd/pagelog-raft

# The main job: append, read back, reopen and verify a log of 1,000,000
# messages of 1 KiB, and print the figures.
run: build
	./$(BIN) demo

# Every test: format, vet, the import graph, and the whole suite under the
# race detector (crash tests at their default size included), then the
# raftstore, metrics and bench/peers modules' (each its own go.mod). The
# engine takes about 10 minutes of it on a quiet 2-core machine and three
# times that at a load of 15-20: the timeout, 45 minutes, only catches a
# hang. As root (CI), the full-disk tests must mount their tmpfs: they fail
# instead of skipping (internal/tmpfstest).
REQUIRE_TMPFS := $(shell [ "$$(id -u)" = 0 ] && echo 1)

test: fmt-check vet deps cross-quick
	PAGELOG_REQUIRE_TMPFS=$(REQUIRE_TMPFS) $(GO) test -race -count=1 -timeout 45m ./...
	cd raftstore && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...
	cd metrics && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd bench/peers && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...

# Every platform pagelog builds for (linux/{amd64,arm64,386,arm},
# darwin/{amd64,arm64}, freebsd/amd64, windows/amd64): go build and go
# vet (test files included) of the root module, raftstore and metrics
# (bench/peers on linux/amd64). Cross-compiling only; CI (.ci/run) runs
# it after `make test`. With a cold build cache each platform takes one
# to two minutes (the standard library is compiled for it), so `make
# test` runs cross-quick: one platform of each kind the others differ in
# (32-bit, Windows, darwin, FreeBSD), under a minute once cached.
cross:
	./scripts/crossbuild.sh

cross-quick:
	PLATFORMS="linux/386 windows/amd64 darwin/arm64 freebsd/amd64" ./scripts/crossbuild.sh

# The test suites of the root module, raftstore and metrics run for
# linux/arm64 and linux/arm (32-bit) under qemu-user, in -short mode (the
# crash and stress tests at their small sizes; a full-size run takes hours
# under emulation), one package at a time. It installs and registers
# qemu-user-static and binfmt-support when missing (root). linux/386 is
# built and vetted but not run here (see scripts/testcross.sh).
# ARCHES="arm64" runs one of them.
test-cross:
	./scripts/testcross.sh

# The size CI runs (after make test): both architectures, the root
# module's packages but engine, queue and cmd/pagelog, and of the engine
# the tests of what differs between architectures (scripts/testcross.sh).
test-cross-quick:
	QUICK=1 ./scripts/testcross.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The import graph of STYLE.md (also checked by deps_test.go in `make test`).
deps:
	$(GO) test -count=1 -run TestImportGraph .

# Benchmarks (run them on a quiet machine): the engine's own Go benchmarks
# over -count=10, summarized by benchstat, then the peer comparison, then the
# latency chart (bench/results/latency.svg and latency.txt: every timed
# append of the tail benchmarks' ten runs and of the peer comparison, by
# percentile, from the histograms in bench/results/latency/). Results go to
# bench/results/.
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
BENCHSTAT         := bin/benchstat
PEERFLAGS         ?=

bench: $(BENCHSTAT)
	mkdir -p bench/results/latency
	rm -f bench/results/latency/*.hist
	PAGELOG_BENCH_LATENCY_DIR=$(CURDIR)/bench/results/latency \
		$(GO) test -run '^$$' -bench . -benchmem -count=10 ./bench/ > bench/results/engine.txt
	$(BENCHSTAT) bench/results/engine.txt > bench/results/engine-benchstat.txt
	@$(MAKE) --no-print-directory bench-peers
	$(GO) build -C bench/peers -o $(CURDIR)/bin/latchart ./cmd/latchart
	./bin/latchart --dir bench/results/latency --out bench/results

$(BENCHSTAT):
	GOBIN=$(CURDIR)/bin $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

# pagelog beside its peers and the machine's limits, in one run (bench/peers
# is its own module: the peers never enter go.mod). PEERFLAGS=--quick runs
# it in about 30 s; PEERFLAGS="--dir D" measures the disk that holds D.
bench-peers:
	mkdir -p bench/results
	$(GO) build -C bench/peers -o $(CURDIR)/bin/peerbench ./cmd/peerbench
	./bin/peerbench --out bench/results $(PEERFLAGS)

# Two builds compared: `make bench-compare BASE=<rev>` builds BASE (a
# detached worktree in a temporary directory) and the current tree (or
# HEAD=<rev>), runs the core benchmarks (append, append tail, read, read
# beside a writer, queue cycle, queue steady state, and the copy+CRC floor
# of the read) on both, interleaved over ROUNDS rounds (default 6), and
# prints benchstat's comparison. SHORT=1 leaves out the 1 GiB tail and the
# 4 GiB steady state (a few minutes: CI's report-only run). See
# scripts/bench-compare.sh.
ROUNDS ?= 6
bench-compare: $(BENCHSTAT)
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=<rev> [HEAD=<rev>] [ROUNDS=6] [SHORT=1]"; exit 2; }
	BASE="$(BASE)" HEAD="$(HEAD)" ROUNDS="$(ROUNDS)" SHORT="$(SHORT)" BENCHSTAT=$(CURDIR)/$(BENCHSTAT) \
		GO="$(GO)" bash scripts/bench-compare.sh

# The fuzz targets of fuzz/ (seed corpora in fuzz/testdata/fuzz, replayed by
# `make test`): `make fuzz` runs each for FUZZTIME, one after another;
# `make fuzz-smoke` runs each for 10 s (CI). The engine targets open a few
# logs per input, so their scratch directories go to a tmpfs when there is
# one (an fsync costs nothing there: about 5x the executions), and new
# inputs are minimized for at most FUZZMINIMIZETIME, 10 s (go test's default
# of 60 s leaves a slow target little time to explore).
FUZZ_TARGETS := FuzzRecordDecode FuzzRecordRoundTrip FuzzOpenActiveSegment FuzzIndexFiles \
	FuzzWarmSearch FuzzSparseIndex FuzzQueueOps FuzzFollowTorn
FUZZMINIMIZETIME ?= 10s
FUZZ_TMPDIR ?= $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo $${TMPDIR:-/tmp})

# Go 1.26's fuzz coordinator may end a run that found nothing with a bare
# "context deadline exceeded" as -fuzztime expires (golang.org/issue/75804,
# fixed in Go 1.27): such a run, with no failing input written, passes.
fuzz:
	@log=$$(mktemp); trap 'rm -f $$log $$log.rc' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		echo "== $$t ($(FUZZTIME))"; \
		{ TMPDIR=$(FUZZ_TMPDIR) $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) \
			-fuzzminimizetime $(FUZZMINIMIZETIME) ./fuzz/ 2>&1; echo $$? >$$log.rc; } | tee $$log; \
		[ "$$(cat $$log.rc)" = 0 ] && continue; \
		if grep -q 'context deadline exceeded' $$log && \
			! grep -q -e 'Failing input written' -e 'failure while testing seed corpus' $$log; then \
			echo "== $$t: the fuzztime deadline race of golang.org/issue/75804, not a failure"; \
			continue; \
		fi; \
		exit 1; \
	done

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=10s

# The long crash and stress runs (done once; figures in docs/durability.md and
# bench/README.md): 1,000 kill -9 rounds, 10,000 simulated power failures,
# a minute of reader processes beside a writer, and 1,000 runs each of
# verify, dump and read beside `pagelog append`.
crash-long:
	$(GO) test -v -count=1 -timeout 90m -run 'TestCrash(ProcessKill|PowerLoss|TornTail)$$|TestReadersBesideWriter$$' ./engine \
		-crash.rounds=1000 -crash.power=10000 -stress.duration=60s
	$(GO) test -v -count=1 -timeout 60m -run 'TestCommandsBesideWriter$$' ./cmd/pagelog -beside.runs=1000

clean:
	rm -rf bin
