package queue

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/testkit"
)

// syncDisk is the simulated disk of the queue's power-loss tests: it
// watches the syncs that really happen, through the sync hook every log
// and checkpoint of a directory goes through (checkpoint.SetSyncHook),
// and builds what a power failure may leave from them alone. For each of
// the queue's directories (its own, its delete and receive-count logs',
// and the same of its dead letters) it keeps:
//
//   - at each fdatasync of a file, the file's content, by inode (a hard
//     link in a shadow directory keeps every inode it has seen, so that
//     none is reused under it while the test runs);
//   - at each fsync of the directory, its entries (name -> inode).
//
// What a power failure leaves (build): each directory as its last sync
// left it, or with every entry made since (an ordered metadata journal
// keeps a prefix), or with those but without the newest segments never
// synced; each file torn, 4 KiB page by page and 512-byte sector by
// sector, between its content at its last sync (zeros, or nothing, when
// never synced) and its content now. A checkpoint file (queue.head,
// log.meta, ...) is written whole and synced before its rename: it is the
// content of its inode's last sync, never torn. Nothing the queue did not
// sync survives for sure: a missing fdatasync or directory sync in the
// queue loses what it should have kept.
type syncDisk struct {
	dirs   []string // watched: the queue's directories
	layout func(dir string) []string
	shadow string // hard links that keep every inode seen

	mu     sync.Mutex
	frozen bool // the power failed: syncs after it keep nothing
	// synced holds each inode's content at its last sync; names each
	// directory's entries at its last sync.
	synced map[uint64][]byte
	names  map[string]map[string]uint64
	linked map[uint64]bool
	// fileSyncs and dirSyncs count the syncs seen, per directory.
	fileSyncs, dirSyncs map[string]int
	// onSync, when set, runs at each sync before it is kept (with d.mu
	// held), with the path of the file or directory synced: the tests
	// note there what the sync covers.
	onSync func(path string, isDir bool)
}

// syncDiskStats counts what the images were made of.
type syncDiskStats struct {
	images, entriesLost, entriesBack int
	testkit.TearStats
}

func (st syncDiskStats) String() string {
	return fmt.Sprintf("%d images: %d entries lost, %d back; %d files torn (%d sectors new, %d old), %d files never synced",
		st.images, st.entriesLost, st.entriesBack, st.FilesTorn, st.SectorsNew, st.SectorsOld, st.Unsynced)
}

// queueDirs lists the directories of the queue at dir and of its dead
// letters.
func queueDirs(dir string) []string {
	var out []string
	for _, d := range []string{dir, DeadLetterPath(dir)} {
		out = append(out, d, filepath.Join(d, deletesDir), filepath.Join(d, receivesDir))
	}
	return out
}

// storeDirs lists the directories of the store at dir: its logs'.
func storeDirs(dir string) []string {
	var out []string
	for _, sub := range []string{storeHeadsDir, storeDeletesDir, storeReceivesDir, storeMessagesDir, storeNamesDir} {
		out = append(out, filepath.Join(dir, sub))
	}
	return out
}

// newSyncDisk watches the syncs of the queue to be opened at dir (it must
// be set before Open: a log takes its hook when it opens).
func newSyncDisk(t testing.TB, dir string) *syncDisk {
	return newSyncDiskOf(t, dir, queueDirs)
}

// newSyncDiskOf watches the syncs of the directories layout(dir), of a
// queue or a store to be opened at dir; build writes them to
// layout(disk).
func newSyncDiskOf(t testing.TB, dir string, layout func(string) []string) *syncDisk {
	t.Helper()
	d := &syncDisk{
		dirs: layout(dir), layout: layout, shadow: t.TempDir(),
		synced: map[uint64][]byte{}, names: map[string]map[string]uint64{}, linked: map[uint64]bool{},
		fileSyncs: map[string]int{}, dirSyncs: map[string]int{},
	}
	for _, dir := range d.dirs {
		remove := checkpoint.SetSyncHook(dir, func(f *os.File) error { return d.sync(dir, f) })
		t.Cleanup(remove)
	}
	return d
}

// sync is the hook of the directory dir: f is dir itself or one of its
// files. It makes the real sync too, so that the queue runs at the pace a
// disk sets: with syncs that cost nothing (a tmpfs) the workload of
// TestQueuePowerLoss meets messages whose body reads as zeros, a defect
// of its own, not one of the simulation.
func (d *syncDisk) sync(dir string, f *os.File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen {
		return nil
	}
	if d.onSync != nil {
		d.onSync(f.Name(), st.IsDir())
	}
	if st.IsDir() {
		d.dirSyncs[dir]++
		d.names[dir] = d.list(dir)
		return nil
	}
	d.fileSyncs[dir]++
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) { // EOF: a seal trimmed it meanwhile
		return fmt.Errorf("simulation: read %s to keep it: %w", f.Name(), err)
	}
	ino := testkit.Inode(st)
	d.synced[ino] = b[:n]
	d.pin(ino, f.Name())
	return nil
}

// pin keeps the inode of the file at path (hard-linked into the shadow
// directory) so that it is never reused for another file. The caller
// holds d.mu.
func (d *syncDisk) pin(ino uint64, path string) {
	if !d.linked[ino] && os.Link(path, filepath.Join(d.shadow, strconv.FormatUint(ino, 10))) == nil {
		d.linked[ino] = true
	}
}

// list returns the regular files of dir now, by name, pinning each. The
// caller holds d.mu.
func (d *syncDisk) list(dir string) map[string]uint64 {
	out := map[string]uint64{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		ino := testkit.Inode(info)
		out[e.Name()] = ino
		d.pin(ino, filepath.Join(dir, e.Name()))
	}
	return out
}

// writeback makes everything in the directories durable as it is now, as
// if the system had written every dirty page and entry back: the base of
// a test that then follows only the queue's own syncs.
func (d *syncDisk) writeback() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dir := range d.dirs {
		d.names[dir] = d.list(dir)
		for name, ino := range d.names[dir] {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				d.synced[ino] = b
			}
		}
	}
}

// crash is the power failure: syncs from now on keep nothing.
func (d *syncDisk) crash() {
	d.mu.Lock()
	d.frozen = true
	d.mu.Unlock()
}

// syncs returns how many file and directory syncs of dir were seen.
func (d *syncDisk) syncs(dir string) (files, dirs int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fileSyncs[dir], d.dirSyncs[dir]
}

func isCheckpointFile(name string) bool {
	switch name {
	case headName, "log.meta", "log.clean", "log.recovery":
		return true
	}
	return false
}

// build writes into disk (the queue's directory; its dead letters go to
// DeadLetterPath(disk); or the store's) what the power failure may have left. rng nil:
// exactly what was synced, nothing torn and no entry made since the last
// directory sync. Call it after crash.
func (d *syncDisk) build(t testing.TB, rng *rand.Rand, disk string, st *syncDiskStats) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.frozen {
		t.Fatal("simulation: build before the crash")
	}
	st.images++
	for i, dir := range d.dirs {
		to := d.layout(disk)[i]
		if err := os.MkdirAll(to, 0o700); err != nil {
			t.Fatal(err)
		}
		durable := d.names[dir]
		cur := d.list(dir)
		paths := map[uint64]string{} // inode -> where it is now
		for name, ino := range cur {
			paths[ino] = filepath.Join(dir, name)
		}
		names := maps.Clone(durable)
		if names == nil {
			names = map[string]uint64{}
		}
		mode := 0
		if rng != nil {
			mode = rng.IntN(3)
		}
		if mode > 0 {
			// Every entry made since the last directory sync, or all but
			// the newest segments never synced.
			names = maps.Clone(cur)
			var fresh []string
			for name, ino := range cur {
				if durable[name] != ino && strings.HasSuffix(name, ".log") && d.synced[ino] == nil {
					fresh = append(fresh, strings.TrimSuffix(name, ".log"))
				}
			}
			slices.Sort(fresh)
			for k := len(fresh) - 1; mode == 2 && k >= 0 && rng.IntN(2) == 0; k-- {
				for _, suffix := range []string{".log", ".index", ".timeindex"} {
					delete(names, fresh[k]+suffix)
				}
			}
			for name, ino := range durable {
				if names[name] != ino {
					st.entriesBack++
				}
			}
		}
		for name, ino := range cur {
			if names[name] != ino {
				st.entriesLost++
			}
		}
		for name, ino := range names {
			synced, ok := d.synced[ino]
			var out []byte
			switch {
			case isCheckpointFile(name):
				if !ok {
					// Renamed into place after its sync: the entry there
					// before it, or none.
					if ino, ok = durable[name]; !ok {
						continue
					}
					synced = d.synced[ino]
				}
				out = synced
			case rng == nil:
				out = synced
			default:
				now := synced
				if p, there := paths[ino]; there {
					if b, err := os.ReadFile(p); err == nil {
						now = b
					}
				}
				out = testkit.TearFile(rng, synced, ok, now, &st.TearStats)
			}
			if err := os.WriteFile(filepath.Join(to, name), out, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}
