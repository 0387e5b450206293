#!/usr/bin/env bash
# Makes this Linux machine run linux/arm64 and linux/arm binaries under
# qemu-user, for `make test-cross`: installs Debian's qemu-user-static and
# binfmt-support when missing, mounts binfmt_misc and registers the
# emulators with the kernel, so that a test binary that re-executes itself
# (the crash tests' children) runs under the emulator too. Needs root for
# what is missing; does nothing when all is in place.
set -euo pipefail
need=()
for b in qemu-aarch64-static qemu-arm-static; do command -v "$b" >/dev/null || need=(qemu-user-static); done
command -v update-binfmts >/dev/null || need+=(binfmt-support)
if [ ${#need[@]} -gt 0 ]; then
	apt-get install -y "${need[@]}" || { apt-get update && apt-get install -y "${need[@]}"; }
fi
if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
	mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
for fmt in qemu-aarch64 qemu-arm; do
	[ -e /proc/sys/fs/binfmt_misc/$fmt ] || update-binfmts --enable $fmt
done
