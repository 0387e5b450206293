// Package stopwatch times single operations of a latency benchmark (the
// bench package's and `pagelog bench`'s) at little cost to them:
//
//	t := stopwatch.Start()
//	// the operation
//	lat = append(lat, t.Elapsed())
//
// time.Now and time.Since read the clock through the vDSO. On the
// project's machine (a KVM guest on kvm-clock) they cost about 97 and 50 ns,
// so the pair around every timed operation added some 150 ns to it and to
// the run's wall time: a tenth of a queue's send, receive and delete. The
// time-stamp counter, read behind an LFENCE, costs about 35 ns. It is used
// where the kernel reports that it ticks at one rate through frequency
// changes and sleep states (constant_tsc and nonstop_tsc in /proc/cpuinfo),
// and it is converted to nanoseconds at a rate measured against the
// monotonic clock at the first use (50 ms). On that machine the counters of
// the two vCPUs agree to within a cache line's round trip (under 100 ns: a
// read on one CPU after a store seen from the other is never earlier), so
// an operation that moves between CPUs is still timed right. Elsewhere a
// stamp is one read of the runtime's monotonic clock.
package stopwatch

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

var clockOnce sync.Once

var (
	useTSC    bool
	nsPerTick float64
	base      = time.Now()
)

// Stamp is when an operation started, in the stopwatch's own units.
type Stamp int64

// Start returns a stamp for timing one operation.
func Start() Stamp {
	clockOnce.Do(calibrate)
	if useTSC {
		return Stamp(tsc())
	}
	return Stamp(time.Since(base))
}

// Elapsed returns the time from the stamp to now.
func (t Stamp) Elapsed() time.Duration {
	if useTSC {
		return time.Duration(float64(tsc()-int64(t)) * nsPerTick)
	}
	return time.Since(base) - time.Duration(t)
}

// calibrate chooses the clock and measures the counter's rate.
func calibrate() {
	if !constantTSC() {
		return
	}
	const span = 50 * time.Millisecond
	t0, c0 := time.Now(), tsc()
	for time.Since(t0) < span {
	}
	c1 := tsc()
	d := time.Since(t0)
	if c1 <= c0 {
		return
	}
	nsPerTick = float64(d) / float64(c1-c0)
	useTSC = true
}

// constantTSC reports whether the time-stamp counter can time operations:
// amd64, and a kernel that says it ticks at a constant rate, also in deep
// sleep states.
func constantTSC() bool {
	if runtime.GOARCH != "amd64" {
		return false
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			f := strings.Fields(v)
			return slices.Contains(f, "constant_tsc") && slices.Contains(f, "nonstop_tsc")
		}
	}
	return false
}
