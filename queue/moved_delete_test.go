package queue

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// appendDeleteClosed appends a delete record naming off to the delete log of
// the closed queue in dir, as a queue would.
func appendDeleteClosed(t *testing.T, dir string, off uint64) {
	t.Helper()
	q := openEarlyQueue(t, dir, newFakeClock(), func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1000 // no move at open
	})
	q.mu.Lock()
	_, err := q.appendDelete(off)
	q.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.dels.Sync(); err != nil {
		t.Fatal(err)
	}
	q.ck.mu.Lock()
	q.ck.stopped = true
	q.ck.mu.Unlock()
	// Closed without a checkpoint: nothing else of the copy changes.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// Deletes naming the original or an older copy of a moved message, in
// crash copies whose log holds them beside the newest copy: the message is
// deleted for Open, Messages and Stat alike. Open once scanned for copies
// from the cursor, which had already stepped over a deleted older copy at
// the head: it handed the message out, and Stat counted it, while
// Messages left it out.
func TestDeleteNamingOlderCopyDeletesMovedMessage(t *testing.T) {
	b := newBrowseHeld(t, 12)
	defer func() { mustCloseQueue(t, b.q) }()
	copies := browseRounds(t, b, 12)
	checked := 0
	for _, c := range copies {
		st, err := Stat(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range browseList(t, c.dir) {
			if m.Record == m.Offset {
				continue
			}
			// Older records of m: its original (at or above the head) and
			// older copies.
			var older []uint64 // (a delete record below queue.head's head is void)
			if m.Offset >= st.Head && m.Offset >= st.Checkpointed {
				older = append(older, m.Offset)
			}
			l := browseReadLog(t, c.dir)
			for _, r := range l[m.Offset] {
				if r != m.Record && r >= st.Checkpointed {
					older = append(older, r)
				}
			}
			for _, r := range older {
				phase := fmt.Sprintf("%s, a delete naming record %d of moved message %d (newest copy %d, head %d)", c.name, r, m.Offset, m.Record, st.Head)
				d := filepath.Join(t.TempDir(), "q")
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				testkit.MustCopyDir(t, c.dir, d, true)
				appendDeleteClosed(t, d, r)
				live := maps.Clone(c.live)
				delete(live, m.Offset)
				cc := c
				cc.name, cc.dir, cc.live = phase, d, live
				t.Run(fmt.Sprintf("delete%d", checked), func(t *testing.T) { cc.check(t) })
				checked++
			}
		}
	}
	t.Logf("%d deletes of older records", checked)
	if checked < 3 {
		t.Fatalf("only %d deletes of older records", checked)
	}
}
