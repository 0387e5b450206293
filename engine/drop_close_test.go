package engine

import (
	"os"
	"slices"
	"testing"
	"time"
)

// A drop renames and removes its files outside the append lock; Close
// waits for a drop in flight, so that nothing changes the directory after
// Close returns (another process may open it then).
func TestCloseWaitsForDropInFlight(t *testing.T) {
	for round := range 8 {
		dir := t.TempDir()
		o := Options{SegmentBytes: 4 << 10}
		if round%2 == 1 {
			o.RecycleSegments = 2
		}
		l := mustOpen(t, dir, o)
		for len(*l.segs.Load()) < 120 {
			if _, err := l.Append(testBody(l.Next(), 1000)); err != nil {
				t.Fatal(err)
			}
		}
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			close(started)
			_, err := l.DropBefore(l.Next())
			done <- err
		}()
		<-started
		time.Sleep(time.Duration(round%4) * 100 * time.Microsecond)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		list := func() []string {
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return names
		}
		at := list()
		if err := <-done; err != nil && err != ErrClosed {
			t.Fatalf("round %d: DropBefore: %v", round, err)
		}
		if after := list(); !slices.Equal(at, after) {
			t.Fatalf("round %d: the directory changed after Close returned: %d entries, then %d", round, len(at), len(after))
		}
		l2 := mustOpen(t, dir, o)
		if st := l2.Stats(); st.Next != l.Next() {
			t.Fatalf("round %d: reopened with next %d, want %d", round, st.Next, l.Next())
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
