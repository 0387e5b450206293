package queue

import (
	"strings"
	"testing"
	"time"
)

// PauseDrops keeps checkpoints from removing segments, and the first
// checkpoint after resume removes them, though the head has not moved
// since.
func TestPauseDrops(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	body := strings.Repeat("b", 500)
	for range 60 {
		mustSend(t, q, body)
	}
	resume := q.PauseDrops()
	for _, m := range drain(t, q) {
		mustDelete(t, q, m.Offset)
	}
	segs := q.log.Stats().Segments
	if segs < 5 {
		t.Fatalf("only %d segments", segs)
	}
	for range 5 {
		clock.Advance(2 * time.Second)
		time.Sleep(time.Millisecond)
	}
	if st := q.Stats(); st.Log.Segments != segs || st.Checkpointed != st.End {
		t.Fatalf("paused: %d segments (was %d), checkpointed %d of %d", st.Log.Segments, segs, st.Checkpointed, st.End)
	}
	resume()
	resume() // a second call does nothing
	for i := 0; q.log.Stats().Segments > 2; i++ {
		if i > 50 {
			t.Fatalf("after resume: %d segments stay", q.log.Stats().Segments)
		}
		clock.Advance(2 * time.Second)
		time.Sleep(time.Millisecond)
	}
	if n := q.ck.paused.Load(); n != 0 {
		t.Fatalf("paused count %d after resume", n)
	}
}
