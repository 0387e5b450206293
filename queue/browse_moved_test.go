package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Messages beside moves: a message whose original and copy are both in the
// log (a move the next checkpoint has not passed) comes once, at its
// offset's place, read from the copy; a delete naming the copy deletes it;
// once the checkpoints drop the originals, the copies' messages still come
// in offset order (raftstore's snapshots walk Messages in offset order).
// Stat counts each once too.
func TestMessagesBesideMoves(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openHeldQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	nextSegment := func() { sendToNextSegment(t, q, strings.Repeat("f", 200)) }
	want := map[uint64]string{}
	var held []uint64
	for i := range 3 {
		body := fmt.Sprint("held-", i)
		off := mustSend(t, q, body)
		want[off], held = body, append(held, off)
		nextSegment()
	}
	nextSegment()
	// A ready message after the held ones, never received.
	want[mustSend(t, q, "ready")] = "ready"
	waitKicked(t, q)
	for _, m := range receiveAll(t, q) {
		if _, ok := want[m.Offset]; ok {
			continue
		}
		mustDelete(t, q, m.Offset)
	}
	// The ready message was handed out too: release it.
	for off, body := range want {
		if body == "ready" {
			if err := q.Release(off); err != nil {
				t.Fatal(err)
			}
		}
	}

	check := func(when string, moved int) {
		t.Helper()
		var got []Stored
		if err := Messages(dir, func(m Stored) bool {
			m.Body = []byte(string(m.Body))
			got = append(got, m)
			return true
		}); err != nil {
			t.Fatalf("%s: Messages: %v", when, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: Messages gave %d messages, want %d: %+v", when, len(got), len(want), got)
		}
		n := 0
		for i, m := range got {
			if i > 0 && m.Offset <= got[i-1].Offset {
				t.Fatalf("%s: Messages gave %d after %d", when, m.Offset, got[i-1].Offset)
			}
			if m.Err != nil || string(m.Body) != want[m.Offset] {
				t.Fatalf("%s: message %d: %q, %v; want %q", when, m.Offset, m.Body, m.Err, want[m.Offset])
			}
			if m.Record != m.Offset {
				n++
			}
		}
		if n < moved {
			t.Fatalf("%s: %d messages read from copies, want at least %d", when, n, moved)
		}
		if st, err := Stat(dir); err != nil || st.Messages != uint64(len(want)) {
			t.Fatalf("%s: Stat: %d messages, %v; want %d", when, st.Messages, err, len(want))
		}
	}
	check("before any move", 0)

	// One move, no checkpoint after it: the original stays in the log.
	q.ck.mu.Lock()
	n, err := q.moveHeld(false)
	q.ck.mu.Unlock()
	if err != nil || n != 1 {
		t.Fatalf("moveHeld: %d, %v", n, err)
	}
	check("original and copy in the log", 1)

	// A delete of the moved message names its copy.
	mustDelete(t, q, held[0])
	delete(want, held[0])
	check("the moved message deleted", 0)

	// Checkpoints move the others and drop the originals' segments.
	for i := 0; q.Stats().Moved < 3 || q.log.Stats().Segments > 3; i++ {
		if i > 400 {
			t.Fatalf("the held messages never moved: %+v", q.Stats())
		}
		clock.Advance(earlyInterval / 8)
		time.Sleep(100 * time.Microsecond)
	}
	if first := q.log.First(); first <= held[2] {
		t.Fatalf("the originals' segments stay: first %d, held %v", first, held)
	}
	check("originals gone", 2)
}
