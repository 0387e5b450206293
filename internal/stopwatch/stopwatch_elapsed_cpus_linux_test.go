package stopwatch

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestElapsedWithinClockAcrossCPUs: Elapsed lies within the monotonic
// clock's bounds for a stamp taken on one CPU and read on another (the
// goroutine's thread moved with sched_setaffinity), and for stamps read on
// other goroutines, on every CPU the process may use.
func TestElapsedWithinClockAcrossCPUs(t *testing.T) {
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
			checkElapsedBetween(t, "moved between CPUs", func() { pin(to) })
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
