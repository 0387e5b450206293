//go:build !linux

package engine

import "time"

// futexShared is false where there is no futex: readers poll.
const futexShared = false

func futexWait(addr *uint32, val uint32, d time.Duration) { time.Sleep(d) }

func futexWake(addr *uint32) {}
