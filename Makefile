# pagelog: `make run` runs the demo, `make test` runs every test.
GO       ?= go
FUZZTIME ?= 60s
BIN      := bin/pagelog

.PHONY: all build run test unit fmt-check vet deps race bench fuzz fuzz-smoke crash-long clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/pagelog

# The main job: append, read back, reopen and verify a log of 1,000,000
# messages of 1 KiB, and print the figures.
run: build
	./$(BIN) demo

# Every test: format, vet, the import graph, and the whole suite under the
# race detector (crash tests at their default size included).
test: fmt-check vet deps
	$(GO) test -race -count=1 -timeout 20m ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The import graph of STYLE.md (also checked by deps_test.go in `make test`).
deps:
	$(GO) test -count=1 -run TestImportGraph .

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=10 ./bench/ | tee bench/results/engine.txt

clean:
	rm -rf bin
