package engine

import (
	"context"
	"testing"
	"time"
)

// SkipTo wakes a Wait for an offset it skips: the offset exists from then
// on (as a missing one), and the waiter must not sleep until the next
// append.
func TestSkipToWakesWait(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	appendN(t, l, 3, func(uint64) int { return 10 })
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background(), 5) }()
	waitFor(t, "the waiter to block", func() bool { return l.waits.n.Load() == 1 })
	if err := l.SkipTo(10); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait(5) after SkipTo(10): %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait(5) still blocked a minute after SkipTo(10) moved the end past it")
	}
}
