package queue

import (
	"fmt"
	"testing"
	"time"
)

// A redelivered message is moved to the end of the log while its receiver
// holds its body; the receiver then extends its deadline. The body must stay
// valid until the new deadline.
func TestPinsExtendAfterMoveKeepsBody(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.Visibility = time.Hour })
	defer mustCloseQueue(t, q)
	const body = "stuck message body ......................................"
	stuck := mustSend(t, q, body)
	if m, ok := tryRecv(t, q); !ok || m.Offset != stuck {
		t.Fatal("not handed out")
	}
	clock.Advance(time.Hour) // the first deadline passes
	b, ok := tryRecv(t, q)
	if !ok || b.Offset != stuck || b.Receives != 2 {
		t.Fatalf("redelivery: %v %+v", ok, b)
	}
	for i := range 3000 {
		s := fmt.Sprint("m", i)
		off := mustSend(t, q, s)
		m, ok := tryRecv(t, q)
		if !ok || m.Offset != off {
			t.Fatalf("message %d: %v %+v", i, ok, m)
		}
		mustDelete(t, q, m.Offset)
		if i%100 == 0 {
			clock.Advance(time.Second)
		}
	}
	st := q.Stats()
	if st.Moved == 0 || q.log.First() <= stuck {
		t.Fatalf("not moved: %+v, log from %d", st, q.log.First())
	}
	if string(b.Body) != body {
		t.Fatalf("body changed before the first deadline: %q", b.Body)
	}
	if err := q.ChangeVisibility(stuck, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	clock.Advance(90 * time.Minute) // past the redelivery's first deadline, before the extended one
	for i := range 500 {            // roll and reuse files
		off := mustSend(t, q, fmt.Sprint("n", i))
		m, ok := tryRecv(t, q)
		if !ok || m.Offset != off {
			t.Fatalf("n %d: %v %+v", i, ok, m)
		}
		mustDelete(t, q, m.Offset)
	}
	clock.Advance(time.Second)
	if string(b.Body) != body {
		t.Fatalf("the body of a message whose deadline was extended changed before that deadline: %q", b.Body)
	}
}
