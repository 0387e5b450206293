package testkit

import (
	"runtime"
	"testing"
)

// ThreadCPUPerOp reports, as the metric cpu-ns/op, the CPU time the
// benchmark's own goroutine spends from the call to the stop it returns,
// per b.N: the cost of the loop itself, which a loaded machine does not
// inflate (time spent waiting for a core is not in it, nor the work of
// the code's background goroutines). Call it after b.ResetTimer and stop
// after the loop. Where the system does not count a thread's CPU time,
// nothing is reported.
func ThreadCPUPerOp(b *testing.B) (stop func()) {
	runtime.LockOSThread()
	t0, ok := threadCPU()
	return func() {
		t1, ok1 := threadCPU()
		runtime.UnlockOSThread()
		if ok && ok1 && b.N > 0 {
			b.ReportMetric(float64(t1-t0)/float64(b.N), "cpu-ns/op")
		}
	}
}
