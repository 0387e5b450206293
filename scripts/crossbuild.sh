#!/usr/bin/env bash
# Builds and vets (test files included) the root module, raftstore and
# metrics for every platform pagelog is built for, and bench/peers for
# linux/amd64 only (it compiles the peers' servers, NATS and others: five
# minutes a platform with a cold build cache; PEERS_EVERYWHERE=1 builds it
# for all). It cross-compiles only: nothing runs. `make cross` runs it;
# `make test` runs it first. A failure names the platform and the module.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PLATFORMS=${PLATFORMS:-"linux/amd64 linux/arm64 linux/386 linux/arm darwin/amd64 darwin/arm64 freebsd/amd64 windows/amd64"}
MODULES=${MODULES:-". raftstore metrics"}
fail=0
for p in $PLATFORMS; do
	mods=$MODULES
	if [ "$p" = linux/amd64 ] || [ -n "${PEERS_EVERYWHERE:-}" ]; then
		mods="$mods bench/peers"
	fi
	for m in $mods; do
		if ! out=$(cd "$m" && GOOS=${p%/*} GOARCH=${p#*/} CGO_ENABLED=0 $GO build ./... 2>&1 &&
			GOOS=${p%/*} GOARCH=${p#*/} CGO_ENABLED=0 $GO vet ./... 2>&1); then
			echo "== $p, module $m: FAILED"
			echo "$out"
			fail=1
		fi
	done
	echo "== $p: built and vetted"
done
exit $fail
