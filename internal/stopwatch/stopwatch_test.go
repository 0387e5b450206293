package stopwatch

import (
	"testing"
	"time"
)

// TestElapsedMeasuresTime: a stamp taken before a sleep and read after it
// gives at least the time slept, in nanoseconds (a wrong counter rate
// would give a multiple of it), and agrees with the monotonic clock.
func TestElapsedMeasuresTime(t *testing.T) {
	for range 3 {
		t0 := time.Now()
		s := Start()
		time.Sleep(20 * time.Millisecond)
		got := s.Elapsed()
		want := time.Since(t0)
		if got < 20*time.Millisecond || got > want+time.Millisecond {
			t.Fatalf("tick measured %v over a 20 ms sleep that the monotonic clock measured as %v (time-stamp counter used: %v, %.4f ns per tick)",
				got, want, useTSC, nsPerTick)
		}
	}
	t.Logf("time-stamp counter used: %v, %.4f ns per tick", useTSC, nsPerTick)
}
