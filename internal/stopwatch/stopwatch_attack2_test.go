package stopwatch

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// a2Check measures one interval with a Stamp bracketed by the monotonic
// clock: read before Start and after Elapsed (outer), after Start and
// before Elapsed (inner). Elapsed must lie between them, give or take the
// calibration's error (0.1%) and a few microseconds; never negative.
func a2Check(t *testing.T, what string, wait func()) time.Duration {
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

// TestAttack2ElapsedShortAndLong: back-to-back stamps, spins of a few
// microseconds, sleeps of milliseconds and one of a quarter second.
func TestAttack2ElapsedShortAndLong(t *testing.T) {
	for range 20000 {
		a2Check(t, "back to back", func() {})
	}
	for i := range 2000 {
		d := time.Duration(i%50) * time.Microsecond
		a2Check(t, "spin", func() {
			for t0 := time.Now(); time.Since(t0) < d; {
			}
		})
	}
	for i := range 20 {
		a2Check(t, "sleep", func() { time.Sleep(time.Duration(i) * time.Millisecond) })
	}
	a2Check(t, "long sleep", func() { time.Sleep(250 * time.Millisecond) })
	t.Logf("time-stamp counter used: %v, %.5f ns per tick", useTSC, nsPerTick)
}

// TestAttack2ElapsedAcrossCPUs: a stamp taken on one CPU and read on
// another (the goroutine's thread moved with sched_setaffinity), and
// stamps read on other goroutines, on every CPU the process may use.
func TestAttack2ElapsedAcrossCPUs(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	var cpus []int
	for c := range 1024 {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		t.Skipf("one CPU only (%v)", cpus)
	}
	pin := func(c int) {
		var set unix.CPUSet
		set.Set(c)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			t.Fatalf("sched_setaffinity(%d): %v", c, err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer func() { _ = unix.SchedSetaffinity(0, &allowed) }()
		for i := range 4000 {
			from, to := cpus[i%len(cpus)], cpus[(i+1+i/len(cpus))%len(cpus)]
			pin(from)
			a2Check(t, "moved between CPUs", func() { pin(to) })
		}
	}()
	<-done
	// Stamps handed to other goroutines, read wherever they run.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				t0 := time.Now()
				s := Start()
				ch := make(chan time.Duration)
				go func() { ch <- s.Elapsed() }()
				got := <-ch
				if outer := time.Since(t0); got < 0 || got > outer+outer/1000+5*time.Microsecond {
					t.Errorf("goroutine %d, stamp %d: Elapsed %v read on another goroutine, %v outside", g, i, got, outer)
					return
				}
			}
		}()
	}
	wg.Wait()
}
