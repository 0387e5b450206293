package engine

import (
	"testing"
	"time"
)

// The prefaulter looks on its own while the writer moves and parks once it
// stops; a writer that goes on after it parked wakes it. Pauses of about
// the poll interval go after each burst so that some land in the window
// between its last look and its parking.
func TestPrefaulterParksAndWakes(t *testing.T) {
	l, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	body := make([]byte, 1024)
	caughtUp := func(round int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			l.mu.Lock()
			end, pop := l.active.End(), l.active.Populated()
			l.mu.Unlock()
			// Within a step of its reach: it looks again at each step.
			if pop >= min(end+l.pre.ahead.Load()-l.pre.step.Load(), l.cfg.SegmentBytes) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the prefaulter stopped at %d with the writer at %d", round, pop, end)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for round := range 40 {
		for range 2 << 10 { // 2 MiB: two marks
			if _, err := l.Append(body); err != nil {
				t.Fatal(err)
			}
		}
		caughtUp(round)
		time.Sleep(prefaultPoll * time.Duration(1+round%3) / 2)
	}
	// Idle, it parks once a look finds the writer where it was (a look
	// may take milliseconds of page faults first).
	for deadline := time.Now().Add(time.Minute); l.pre.polling.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the prefaulter still polls with the writer idle")
		}
	}
}
