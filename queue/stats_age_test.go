package queue

import "testing"

// Stats.OldestAgeKnown tells an empty queue (known: 0) from a queue whose
// messages the time index cannot date yet (unknown), and from one it can.
func TestStatsOldestAgeKnown(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock(), func(o *Options) { o.Log.SegmentBytes = 1 << 20 })
	defer q.Close()
	if st := q.Stats(); !st.OldestAgeKnown || st.OldestAge != 0 {
		t.Fatalf("empty queue: age %v, known %v", st.OldestAge, st.OldestAgeKnown)
	}
	mustSend(t, q, "one")
	if st := q.Stats(); st.OldestAgeKnown {
		t.Fatalf("one message, no time-index entry yet: age %v called known", st.OldestAge)
	}
	for range 200 { // about 12 KiB: past the first index interval
		mustSend(t, q, "a message of about sixty bytes ...............................")
	}
	if st := q.Stats(); !st.OldestAgeKnown {
		t.Fatalf("200 messages in one segment: age %v not known", st.OldestAge)
	}
}
