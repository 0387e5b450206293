//go:build unix

package queue

import (
	"syscall"
	"time"
)

// limitAddressSpace limits this process's address space (ulimit -v).
func limitAddressSpace(bytes uint64) error {
	var lim syscall.Rlimit
	setLimit(&lim.Cur, bytes)
	setLimit(&lim.Max, bytes)
	return syscall.Setrlimit(syscall.RLIMIT_AS, &lim)
}

// setLimit sets a field of syscall.Rlimit, a uint64 on Linux and an
// int64 on the BSDs.
func setLimit[T int64 | uint64](p *T, v uint64) { *p = T(v) }

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
