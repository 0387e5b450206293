#!/usr/bin/env bash
# bench-compare.sh: the core benchmarks of two builds, interleaved, compared
# by benchstat.
#
#	BASE=<rev> [HEAD=<rev>] [ROUNDS=6] [COUNT=1] [BENCHTIME=0.5s] [SHORT=1] scripts/bench-compare.sh
#
# BASE (required) is built from a detached worktree of that revision in a
# temporary directory; HEAD is the current work tree (uncommitted changes
# included) unless HEAD=<rev> names a revision. Each round runs every
# group below on both builds, base first in odd rounds and head first in
# even ones, so that a change in the machine's load falls on both. A
# benchmark that does not exist at one revision is reported for the other
# only, not as a failure; so is a package that does not build there.
#
# SHORT=1 runs the short version (CI's report: the tail benchmark and the
# queue's 4 GiB steady state are left out, and rounds are 0.2 s). The
# load (/proc/loadavg) is printed before every round: wall-clock figures
# of a loaded machine say little without it.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
cd "$root"
: "${BASE:?BASE=<rev> names the revision to compare with}"
ROUNDS=${ROUNDS:-6}
COUNT=${COUNT:-1}
SHORT=${SHORT:-0}
if [ "$SHORT" = 1 ]; then
	BENCHTIME=${BENCHTIME:-0.2s}
else
	BENCHTIME=${BENCHTIME:-0.5s}
fi
GO=${GO:-go}
BENCHSTAT_VERSION=${BENCHSTAT_VERSION:-v0.0.0-20260908200009-22c9c6c9d4da}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare.XXXXXX")
worktrees=()
cleanup() {
	for w in "${worktrees[@]}"; do
		git worktree remove --force "$w" >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# benchstat: the one the Makefile installs into bin/, else one installed
# into the temporary directory.
BENCHSTAT=${BENCHSTAT:-$root/bin/benchstat}
if ! [ -x "$BENCHSTAT" ]; then
	GOBIN="$tmp/gobin" $GO install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"
	BENCHSTAT=$tmp/gobin/benchstat
fi

# The groups: name;package;-bench pattern;-benchtime. The read group
# carries the copy+CRC floor (BenchmarkLimitCopyCRC) of the same run.
groups=(
	"append;./bench;^BenchmarkAppend\$/^body=1KiB\$;$BENCHTIME"
	"read;./bench;^(BenchmarkRead|BenchmarkReadLatency)\$/^age=recent\$;$BENCHTIME"
	"limits;./bench;^BenchmarkLimit(CRC|CopyMapped|CopyCRC)\$;$BENCHTIME"
	"beside;./bench;^BenchmarkReadBesideWriter\$;$BENCHTIME"
	"cycle;./queue;^BenchmarkQueueCycle\$;$BENCHTIME"
)
if [ "$SHORT" != 1 ]; then
	groups+=(
		"tail;./bench;^BenchmarkAppendTail\$/^path=(pagelog|pwrite-record|copy-crc)\$;1x"
		"steady;./bench;^BenchmarkQueueSteady\$;1x"
	)
fi

# build SIDE DIR: the test binaries of the packages the groups use.
build() {
	local side=$1 dir=$2 pkg
	for pkg in ./bench ./queue; do
		if [ "$pkg" = ./queue ] && ! [ -d "$dir/queue" ]; then
			# Before queue/ had its own package (ce35f90 and earlier),
			# the queue and its benchmarks lived in the engine.
			pkg=./engine
		fi
		if ! (cd "$dir" && $GO test -c -o "$tmp/$side-${pkg#./}.test" "$pkg") >"$tmp/$side-${pkg#./}.build" 2>&1; then
			echo "bench-compare: $pkg does not build at $side; its benchmarks are skipped there:" >&2
			tail -5 "$tmp/$side-${pkg#./}.build" >&2
		fi
	done
}

checkout() { # checkout REV DIR
	git worktree add --detach "$2" "$1" >/dev/null 2>&1 ||
		{ echo "bench-compare: cannot check out $1" >&2; exit 2; }
	worktrees+=("$2")
}

base_rev=$(git rev-parse --short "$BASE^{commit}")
checkout "$base_rev" "$tmp/base"
build base "$tmp/base"
if [ -n "${HEAD:-}" ]; then
	head_rev=$(git rev-parse --short "$HEAD^{commit}")
	checkout "$head_rev" "$tmp/head"
	build head "$tmp/head"
	head_label=$head_rev
else
	build head "$root"
	head_label="$(git rev-parse --short HEAD)"
	git diff --quiet HEAD -- . 2>/dev/null || head_label="$head_label+worktree"
fi
base_label=$base_rev

# run SIDE: every group once on one build, appended to SIDE.txt.
run() {
	local side=$1 g name pkg pat bt bin
	for g in "${groups[@]}"; do
		IFS=';' read -r name pkg pat bt <<<"$g"
		bin=$tmp/$side-${pkg#./}.test
		[ "$pkg" = ./queue ] && ! [ -x "$bin" ] && bin=$tmp/$side-engine.test
		[ -x "$bin" ] || continue
		# Run from the package's directory, as go test does; a pattern
		# that matches nothing at this revision prints no result lines.
		(cd "$tmp" && PAGELOG_BENCH_DIR=${PAGELOG_BENCH_DIR:-} "$bin" -test.run '^$' \
			-test.bench "$pat" -test.benchtime "$bt" -test.count "$COUNT" -test.benchmem) \
			>"$tmp/$side.out" 2>&1 || { echo "bench-compare: group $name failed at $side:" >&2; tail -5 "$tmp/$side.out" >&2; }
		grep -E '^(goos|goarch|cpu|Benchmark)' "$tmp/$side.out" >>"$tmp/$side.txt" || true
	done
}

echo "bench-compare: base $base_label, head $head_label, $ROUNDS rounds of -count $COUNT, -benchtime $BENCHTIME$([ "$SHORT" = 1 ] && echo ', short')"
: >"$tmp/base.txt"
: >"$tmp/head.txt"
for r in $(seq 1 "$ROUNDS"); do
	echo "round $r/$ROUNDS, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
	if [ $((r % 2)) = 1 ]; then run base; run head; else run head; run base; fi
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"

cp "$tmp/base.txt" "$tmp/$base_label.txt"
cp "$tmp/head.txt" "$tmp/$head_label.txt"
(cd "$tmp" && "$BENCHSTAT" "$base_label.txt" "$head_label.txt")

# The verified read against copy+CRC of the same record, per build (the
# medians of this run): the read's target is at most 3x.
ratio() {
	awk '
		$1 ~ /^BenchmarkRead\/age=recent(-[0-9]+)?$/ { r[nr++] = $3 }
		$1 ~ /^BenchmarkLimitCopyCRC(-[0-9]+)?$/    { c[nc++] = $3 }
		function med(a, n,   i, j, t) {
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2
		}
		END {
			if (nr == 0 || nc == 0) { print "n/a (no copy+CRC benchmark at this revision)"; exit }
			printf "%.0f ns / %.0f ns = %.2fx\n", med(r, nr), med(c, nc), med(r, nr) / med(c, nc)
		}' "$1"
}
echo
echo "verified read (Read/age=recent) / copy+CRC of 1 KiB (LimitCopyCRC), medians:"
echo "  $base_label: $(ratio "$tmp/base.txt")"
echo "  $head_label: $(ratio "$tmp/head.txt")"
