package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// TestReleaseSparesThenDropKeepsFileOnFullDisk: a writer on a full disk
// releases its spare files (as the work queue's head checkpoint does),
// another writer takes the space they held, and the log then drops one
// segment: its file is kept for reuse (nothing prepared counts against
// it), a whole segment of disk. The appends that follow roll, and the
// roll must find room in the file the log keeps: it is the log's own
// space. Without the release (the control), the dropped file goes to
// the prepared segment's count, is removed, and the roll takes the
// prepared segment.
func TestReleaseSparesThenDropKeepsFileOnFullDisk(t *testing.T) {
	for _, release := range []bool{false, true} {
		name := "control"
		if release {
			name = "released"
		}
		t.Run(name, func(t *testing.T) {
			fsdir := mountTmpfs(t, "16m")
			dir := filepath.Join(fsdir, "log")
			const seg = 1 << 20
			l := mustOpen(t, dir, Options{SegmentBytes: seg, RecycleSegments: 1, MaxRecordBytes: 16 << 10})
			body := make([]byte, 4000)
			appendOne := func() error {
				_, err := l.Append(body)
				return err
			}
			for len(*l.segs.Load()) < 5 || l.active.End() < seg*3/4 {
				if err := appendOne(); err != nil {
					t.Fatal(err)
				}
			}
			// The next segment prepared, and the preparer done with it.
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				l.rolls.mu.Lock()
				ready := l.rolls.prepared != nil && !l.rolls.preparing
				l.rolls.mu.Unlock()
				if ready {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no segment prepared")
				}
			}
			fillDisk(t, fsdir)
			if release {
				if n := l.ReleaseSpares(); n == 0 {
					t.Fatalf("nothing released: %v", sparesIn(t, dir))
				}
				fillDisk(t, fsdir) // another writer takes the space
			}
			segs := *l.segs.Load()
			if n, err := l.DropBefore(segs[1].Base()); err != nil || n != 1 {
				t.Fatalf("DropBefore: %d, %v", n, err)
			}
			t.Logf("spare files after the drop: %v", sparesIn(t, dir))
			a := len(*l.segs.Load())
			// Through the roll, and a quarter of the next segment. An
			// append that fails on the full disk is tried again for 2 s
			// (the preparer may be at work).
			var stuck time.Time
			for i := 0; len(*l.segs.Load()) < a+1 || l.active.End() < seg/4; i++ {
				err := appendOne()
				if err == nil {
					stuck = time.Time{}
					continue
				}
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				if stuck.IsZero() {
					stuck = time.Now()
				}
				if time.Since(stuck) < 2*time.Second {
					time.Sleep(time.Millisecond)
					continue
				}
				st := l.Stats()
				if st.RecycledWaiting > 0 {
					t.Fatalf("Append %d on the full disk fails for 2 s: %v, while the log keeps %d dropped segment file(s) for reuse (%v) and nothing is prepared",
						i, err, st.RecycledWaiting, sparesIn(t, dir))
				}
				t.Fatalf("Append %d fails for 2 s: %v (spare files %v)", i, err, sparesIn(t, dir))
			}
			st := l.Stats()
			t.Logf("after the roll: %d segments, %d made from kept files, %d kept; files %v", st.Segments, st.Recycled, st.RecycledWaiting, filesWithDiskKiB(dir))
			readEveryRecordOf(t, l)
			if _, err := os.Stat(dir); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// readEveryRecordOf reads every record of l.
func readEveryRecordOf(t *testing.T, l *Log) {
	t.Helper()
	for off := l.First(); off < l.Next(); off++ {
		r, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		r.Release()
	}
}

// filesWithDiskKiB lists the files of dir with the KiB each takes on disk.
func filesWithDiskKiB(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, fmt.Sprintf("%s:%dK", e.Name(), testkit.DiskBytes(st)/1024))
		}
	}
	return out
}
