#!/usr/bin/env bash
# Runs the test suites of the root module, raftstore and metrics for
# linux/arm64 and linux/arm (32-bit) under qemu-user, one package at a
# time (-p 1: emulation is CPU-heavy), in -short mode (the crash and stress
# tests at their small sizes). ARCHES picks the architectures. linux/386
# is built and vetted by crossbuild.sh but not run: qemu-i386 (Debian 12's
# 7.2) crashes Go 1.26's 386 runtime at start, and a kernel without IA32
# emulation cannot run it natively; linux/arm covers 32-bit.
#
# QUICK=1 is the size CI runs (make test-cross-quick, a few minutes a
# architecture): the root module's packages but the three whose suites
# take 10-11 minutes each under emulation (engine, queue, cmd/pagelog),
# and of the engine the tests of what differs between architectures: the
# address-space budget, the record and index formats and byte order,
# appends, reads, rolls, recovery and the simulated power failures. The
# full run took, for linux/arm64 on 2 cores at a load of 2-12: engine
# 657 s, cmd/pagelog 678 s, the rest of the root module under a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
ARCHES=${ARCHES:-"arm64 arm"}
TIMEOUT=${TIMEOUT:-60m}
QUICK=${QUICK:-}
QUICK_ENGINE='^Test(MappingLimits|AddressSpace|Append|Read|Roll|Recover|Reopen|Open|Format|Record|Index|TimeIndex|CrashPowerLoss|CrashTorn|Verify)'
"$(dirname "$0")/qemu-setup.sh"
fail=0
run() { # arch emulator dir go-test-args...
	local a=$1 emu=$2 dir=$3
	shift 3
	local start
	start=$(date +%s)
	if ! (cd "$dir" && GOARCH=$a $GO test -short -p 1 -count=1 -timeout "$TIMEOUT" -exec "$emu" "$@"); then
		fail=1
	fi
	echo "== linux/$a, $dir $*: $(($(date +%s) - start)) s"
}
for a in $ARCHES; do
	case $a in
	arm64) emu=qemu-aarch64-static ;;
	arm) emu=qemu-arm-static ;;
	*) echo "unknown arch $a"; exit 2 ;;
	esac
	if [ -n "$QUICK" ]; then
		pkgs=$(GOARCH=$a $GO list ./... | grep -vE '/(engine|queue|cmd/pagelog)$')
		# shellcheck disable=SC2086
		run "$a" "$emu" . $pkgs
		run "$a" "$emu" . -run "$QUICK_ENGINE" ./engine
		continue
	fi
	for m in . raftstore metrics; do
		run "$a" "$emu" "$m" ./...
	done
done
exit $fail
