//go:build !linux

package testkit

import "time"

// threadCPU: the system's count of a thread's CPU time is not read here.
func threadCPU() (time.Duration, bool) { return 0, false }
