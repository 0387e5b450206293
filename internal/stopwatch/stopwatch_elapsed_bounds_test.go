package stopwatch

import (
	"testing"
	"time"
)

// checkElapsedBetween measures one interval with a Stamp bracketed by the
// monotonic clock: read before Start and after Elapsed (outer), after Start
// and before Elapsed (inner). Elapsed must lie between them, give or take
// the calibration's error (0.1%) and a few microseconds; never negative.
func checkElapsedBetween(t *testing.T, what string, wait func()) time.Duration {
	t.Helper()
	t0 := time.Now()
	s := Start()
	t1 := time.Now()
	wait()
	t2 := time.Now()
	got := s.Elapsed()
	outer := time.Since(t0)
	inner := t2.Sub(t1)
	slack := outer/1000 + 5*time.Microsecond
	if got < 0 || got > outer+slack || got < inner-slack {
		t.Fatalf("%s: Elapsed %v; the monotonic clock measured %v inside, %v outside (time-stamp counter: %v, %.5f ns per tick)",
			what, got, inner, outer, useTSC, nsPerTick)
	}
	return got
}

// TestElapsedWithinClockShortAndLong: Elapsed lies within the monotonic
// clock's bounds (checkElapsedBetween) for back-to-back stamps, spins of a
// few microseconds, sleeps of milliseconds and one of a quarter second.
func TestElapsedWithinClockShortAndLong(t *testing.T) {
	for range 20000 {
		checkElapsedBetween(t, "back to back", func() {})
	}
	for i := range 2000 {
		d := time.Duration(i%50) * time.Microsecond
		checkElapsedBetween(t, "spin", func() {
			for t0 := time.Now(); time.Since(t0) < d; {
			}
		})
	}
	for i := range 20 {
		checkElapsedBetween(t, "sleep", func() { time.Sleep(time.Duration(i) * time.Millisecond) })
	}
	checkElapsedBetween(t, "long sleep", func() { time.Sleep(250 * time.Millisecond) })
	t.Logf("time-stamp counter used: %v, %.5f ns per tick", useTSC, nsPerTick)
}
