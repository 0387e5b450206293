package engine

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

func fileInode(t *testing.T, p string) uint64 {
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Inode(st)
}

// A power failure after a reused file was named as the active segment but
// before the zeros and the new records were written back: the disk holds
// the reused file as it was when it was last synced, which is the dropped
// segment's records but for the first page, made zero and synced before
// any rename could name the file (zeroHead). The log must open, serve no
// record under another's offset, and go on. (A first version zeroed the
// file in the page cache only: the old first record under the new name
// made the log a misnamed one that no open or recover got past.)
func TestRecyclePowerLossBeforeZerosReachDisk(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10, RecycleSegments: 1, Sync: SyncNone}
	var mu sync.Mutex
	var synced []byte // the reused file as its last sync before activation left it
	o.datasync = func(f *os.File) error {
		if filepath.Base(f.Name()) == segment.PreparedPrefix+segment.LogSuffix {
			b, err := os.ReadFile(f.Name())
			if err != nil {
				return err
			}
			mu.Lock()
			synced = b
			mu.Unlock()
		}
		return f.Sync()
	}
	l := mustOpen(t, dir, o)
	const size = 1000
	n := uint64(0)
	app := func() {
		if _, err := l.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for len(*l.segs.Load()) < 3 {
		app()
	}
	// Drop the oldest segment while nothing is prepared, so that its file
	// is kept, until a segment is made from a dropped file (a kick the
	// preparer had pending may take the slot first); then roll until the
	// active segment is that file: once taken for reuse it keeps its inode
	// number, so the active segment with that number is the reused file.
	// Each try's dropped file, by inode: a file kept in one try may be
	// the one reused after a later try dropped another.
	dropped := map[uint64][]byte{}
	var oldBytes []byte
	for tries := 0; l.Stats().Recycled == 0; tries++ {
		if tries == 200 {
			t.Fatal("no segment made from a dropped file in 200 tries")
		}
		for !l.admitRecycled(func(spare int) bool { return spare == 0 }) {
			for base := l.active.Base(); l.active.Base() == base; {
				app()
			}
			time.Sleep(time.Millisecond)
		}
		seg0 := (*l.segs.Load())[0]
		b, err := os.ReadFile(seg0.Path())
		if err != nil {
			t.Fatal(err)
		}
		dropped[fileInode(t, seg0.Path())] = b
		if _, err := l.DropBefore((*l.segs.Load())[1].Base()); err != nil {
			t.Fatal(err)
		}
		for base := l.active.Base(); l.active.Base() == base; {
			app()
		}
		time.Sleep(time.Millisecond)
	}
	for tries := 0; ; tries++ {
		app()
		if a := l.active; a.Next()-a.Base() >= 3 {
			if b, ok := dropped[fileInode(t, a.Path())]; ok {
				oldBytes = b
				break
			}
		}
		if tries > 5000 {
			t.Fatal("the dropped file never became the active segment")
		}
	}
	activeName := filepath.Base(l.active.Path())
	mu.Lock()
	durable := synced
	mu.Unlock()
	if durable == nil {
		t.Fatal("the reused file was never synced before it was named as a segment")
	}
	for i, c := range durable[:min(len(durable), 4096)] {
		if c != 0 {
			t.Fatalf("byte %d of the reused file was %#x when synced: its first page must be zero on disk", i, c)
		}
	}
	// The crash image: every file as the page cache holds it, but the
	// reused file as the disk last held it (its old records, then the
	// unwritten extents fallocate added, which read as zeros).
	crash := t.TempDir()
	// The roll's goroutine may still be naming the new segment's index
	// files: the picture is taken once it has.
	l.mu.Lock()
	l.awaitSeal()
	l.mu.Unlock()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == activeName {
			// What the disk holds: the file as synced (its first page
			// zero, then the dropped segment's records), and beyond
			// it the unwritten extents fallocate added, reading zero.
			img := make([]byte, len(b))
			copy(img, durable)
			b = img
		}
		if err := os.WriteFile(filepath.Join(crash, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if len(oldBytes) < 4096 || string(durable[4096:len(oldBytes)]) != string(oldBytes[4096:]) {
		t.Log("the reused file was synced after more than its first page was zeroed")
	}
	activeBase := l.active.Base()
	o2 := o
	o2.datasync = nil
	l2, err := Open(crash, o2)
	if err != nil {
		t.Fatalf("Open after a power failure: %v", err)
	}
	defer l2.Close()
	if l2.Next() != activeBase {
		t.Fatalf("Next %d after recovery, want %d: the active segment's records were not written back, and nothing of the reused file may be taken for them", l2.Next(), activeBase)
	}
	for off := l2.First(); off < l2.Next(); off++ {
		checkRead(t, l2, off, size)
	}
	if off, err := l2.Append(testBody(l2.Next(), size)); err != nil || off != activeBase {
		t.Fatalf("Append after recovery: %d, %v; want %d", off, err, activeBase)
	}
}
