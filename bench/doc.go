// Package bench holds the engine's benchmarks. Run them with `make bench`
// (go test -bench over -count=10, compared with benchstat); the figures
// measured on the project's machine are in README.md beside this file.
//
// Names are benchstat-friendly key=value sub-benchmarks; every benchmark
// reports bytes per operation (b.SetBytes) and allocations. Latency
// benchmarks time each operation and report p50 and p99 as extra metrics.
package bench
