package queue

import "testing"

// Stats carries the message log's own figures, for the disk and sync
// alerts of a queue.
func TestStatsLog(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock())
	defer q.Close()
	for i := range 300 {
		mustSend(t, q, "a message of about forty bytes ..........")
		if i == 0 {
			if st := q.Stats(); st.Log.Next != 1 || st.Log.Appends != 1 || st.Log.Segments != 1 {
				t.Fatalf("after one send: %+v", st.Log)
			}
		}
	}
	st := q.Stats()
	if st.Log.Next != st.End || st.Log.Appends != 300 || st.Log.Segments < 2 || st.Log.Bytes <= 0 || st.Log.SyncErr != nil {
		t.Fatalf("after 300 sends into 4 KiB segments: end %d, log %+v", st.End, st.Log)
	}
}
