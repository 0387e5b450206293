package engine

import (
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"time"
)

// A reader in another process (here a read-only Log) holds a record near
// the end of a segment the writer drops; the writer reuses the file, is
// closed and reopened while the reused segment is active, and rolls. The
// held body must stay readable without a fault: the file must never become
// shorter than it was, which only the open that found it can remember
// across the restart (without that, the seal after the restart trimmed
// the file to its records, and the held body's pages faulted).
func TestRecycleReaderHoldsRecordAcrossWriterRestart(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 1, Sync: SyncNone}
	w := mustOpen(t, dir, o)
	const size = 1000
	n := uint64(0)
	app := func(l *Log) {
		if _, err := l.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for len(*w.segs.Load()) < 3 {
		app(w)
	}
	// Drop the oldest segment while nothing is prepared (so that its file
	// is kept), a reader holding its last record, until a segment is made
	// from a dropped file; then roll until the active segment is that
	// file. Which dropped file it was depends on the preparer's timing (a
	// kick it had pending may take the slot first), so a record of each
	// is held (the readers also keep their inode numbers from being
	// reused) and the one of the file that came back is checked.
	held := map[uint64]Record{}
	defer func() {
		for _, r := range held {
			r.Release()
		}
	}()
	for tries := 0; w.Stats().Recycled == 0; tries++ {
		if tries == 200 {
			t.Fatal("no segment made from a dropped file in 200 tries")
		}
		for !w.admitRecycled(func(spare int) bool { return spare == 0 }) {
			for base := w.active.Base(); w.active.Base() == base; {
				app(w)
			}
			time.Sleep(time.Millisecond)
		}
		seg0 := (*w.segs.Load())[0]
		last := (*w.segs.Load())[1].Base() - 1
		ino := fileInode(t, seg0.Path())
		ro := mustOpenRO(t, dir, o)
		r, err := ro.Read(last)
		if err != nil {
			t.Fatal(err)
		}
		held[ino] = r
		defer ro.Close()
		if _, err := w.DropBefore((*w.segs.Load())[1].Base()); err != nil {
			t.Fatal(err)
		}
		for base := w.active.Base(); w.active.Base() == base; {
			app(w)
		}
		time.Sleep(time.Millisecond)
	}
	var rec Record
	for tries := 0; ; tries++ {
		if r, ok := held[fileInode(t, w.active.Path())]; ok {
			rec = r
			break
		}
		app(w)
		if tries > 5000 {
			t.Fatal("no dropped file became the active segment")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = mustOpen(t, dir, o)
	base := w.active.Base()
	path := w.active.Path()
	t.Logf("reused active segment holds %d bytes at reopen", w.active.End())
	if _, err := w.Append(make([]byte, 64<<10-100)); err != nil { // does not fit: a roll seals it
		t.Fatal(err)
	}
	if w.active.Base() == base {
		t.Fatal("no roll")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	t.Logf("reused file now %d bytes", st.Size())
	var sum byte
	err := func() (err error) {
		old := debug.SetPanicOnFault(true)
		defer debug.SetPanicOnFault(old)
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("fault: %v", r)
			}
		}()
		for _, b := range rec.Body {
			sum += b
		}
		return nil
	}()
	if err != nil {
		t.Fatalf("reading a held body of a dropped segment after its file was reused: %v", err)
	}
}
