package queue

import (
	"fmt"
	"testing"
	"time"
)

// One message stays in flight while thousands pass: it is moved (more than
// once) and keeps its offset; every other message is handed out once with
// its own offset and body.
func TestQueueMovedStuckInFlight(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.Visibility = time.Hour })
	defer mustCloseQueue(t, q)
	stuck := mustSend(t, q, "stuck")
	if m, ok := tryRecv(t, q); !ok || m.Offset != stuck {
		t.Fatal("the first message was not handed out")
	}
	for i := range 3000 {
		body := fmt.Sprint("m", i)
		off := mustSend(t, q, body)
		m, ok := tryRecv(t, q)
		if !ok {
			t.Fatalf("message %d (offset %d): nothing to receive; %+v", i, off, q.Stats())
		}
		if m.Offset != off || string(m.Body) != body {
			t.Fatalf("got %d %q, want %d %q", m.Offset, m.Body, off, body)
		}
		mustDelete(t, q, m.Offset)
		if i%100 == 0 {
			clock.Advance(time.Second) // a checkpoint
		}
	}
	st := q.Stats()
	if st.Moved < 2 || st.Messages != 1 || st.InFlight != 1 || st.Head <= stuck {
		t.Fatalf("after 3000 messages past a stuck one: %+v", st)
	}
	if first := q.log.First(); first <= stuck {
		t.Fatalf("the stuck message's segment is still there (log from %d)", first)
	}
	clock.Advance(time.Hour) // its deadline passes
	m, ok := tryRecv(t, q)
	if !ok || m.Offset != stuck || string(m.Body) != "stuck" || m.Receives != 2 {
		t.Fatalf("redelivery of the stuck message: %v %+v, want offset %d body %q receives 2", ok, m, stuck, "stuck")
	}
	mustDelete(t, q, stuck)
	if _, ok := tryRecv(t, q); ok {
		t.Fatal("a message after the last delete")
	}
	if st := q.Stats(); st.Messages != 0 || st.Head != st.End {
		t.Fatalf("after deleting the moved message: %+v", st)
	}
}

// Messages received and left to expire again and again, with deletes in
// between: moves happen, and every message is handed out until deleted.
func TestQueueMovedRedeliveries(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	sent := map[uint64]string{}
	for i := range 3000 {
		body := fmt.Sprint(i)
		sent[mustSend(t, q, body)] = body
	}
	for k := 0; len(sent) > 0 && k < 100000; k++ {
		m, ok := tryRecv(t, q)
		if !ok {
			clock.Advance(testVisibility / 4)
			continue
		}
		if want, ok := sent[m.Offset]; !ok || string(m.Body) != want {
			t.Fatalf("offset %d handed out with body %q, sent %q (%v)", m.Offset, m.Body, want, ok)
		}
		if k%3 == 0 {
			continue // its deadline passes
		}
		mustDelete(t, q, m.Offset)
		delete(sent, m.Offset)
	}
	st := q.Stats()
	if len(sent) > 0 || st.Moved == 0 || st.Messages != 0 {
		t.Fatalf("%d messages never deleted; %+v", len(sent), st)
	}
}
