//go:build linux

package engine

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex operations (linux/futex.h), without FUTEX_PRIVATE_FLAG: the
// word is in a shared file mapping, waited on from several processes.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexShared says whether a reader can sleep on log.notify's futex word
// (the word is in a shared file mapping: the futex is not private).
const futexShared = true

// futexWait sleeps while *addr holds val, for at most d, or until a
// futexWake on the same word in any process that maps the file.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp,
		uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every sleeper on the word.
func futexWake(addr *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp,
		uintptr(1<<31-1), 0, 0, 0)
}
