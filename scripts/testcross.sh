#!/usr/bin/env bash
# Runs the test suites of the root module, raftstore and metrics for
# linux/arm64 and linux/arm (32-bit) under qemu-user, one package at a
# time (-p 1: emulation is CPU-heavy), in -short mode (the crash and stress
# tests at their small sizes). ARCHES picks the architectures. linux/386
# is built and vetted by crossbuild.sh but not run: qemu-i386 (Debian 12's
# 7.2) crashes Go 1.26's 386 runtime at start, and a kernel without IA32
# emulation cannot run it natively; linux/arm covers 32-bit.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
ARCHES=${ARCHES:-"arm64 arm"}
TIMEOUT=${TIMEOUT:-60m}
"$(dirname "$0")/qemu-setup.sh"
fail=0
for a in $ARCHES; do
	case $a in
	arm64) emu=qemu-aarch64-static ;;
	arm) emu=qemu-arm-static ;;
	*) echo "unknown arch $a"; exit 2 ;;
	esac
	for m in . raftstore metrics; do
		start=$(date +%s)
		if ! (cd "$m" && GOARCH=$a $GO test -short -p 1 -count=1 -timeout "$TIMEOUT" -exec "$emu" ./...); then
			fail=1
		fi
		echo "== linux/$a, module $m: $(($(date +%s) - start)) s"
	done
done
exit $fail
