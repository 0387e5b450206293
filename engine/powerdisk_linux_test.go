//go:build linux

package engine

// powerDisk: the simulated disk of the power-loss tests of
// promises_power_linux_test.go. Like crashDisk (crash_power_test.go) it
// keeps, at each fdatasync through the datasync hook, a copy of the file as
// the page cache holds it, and builds what a disk may hold after a power
// failure by tearing what changed since (crashSegmentFile). Unlike
// crashDisk it also keeps the directory: an inotify watch on the log's
// directory gives every create, rename and remove in the order the kernel
// did them, and the directory syncs reach the same hook (dirSyncHooks). A
// directory sync makes every operation before it durable; after a crash,
// the directory holds what the last sync left plus a prefix of the
// operations since (metadata journals keep operations in order), so a file
// created and never covered by a directory sync may be gone, a removed one
// back, a rename undone.
//
// Each file is tracked by identity, not name: when a create is first seen,
// a hard link in a shadow directory keeps its inode, so that a file that
// was renamed over, or removed, can still be put back with the content it
// had. The checkpoint files (log.meta, log.clean, log.recovery) are
// written whole and synced before they are renamed into place, with a
// directory sync right after (internal/checkpoint, outside the hook): the
// rename of one makes every operation before it durable, and their content
// is never torn.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"golang.org/x/sys/unix"
)

type powerDisk struct {
	dir    string // the log's directory, watched
	shadow string // hard links that keep every file seen
	ifd    int    // the inotify descriptor

	mu      sync.Mutex
	nextID  int
	cur     map[string]int // name -> file, as the directory is now
	durable map[string]int // name -> file, as the last directory sync left it
	pending []dirOp        // directory operations since that sync, in order
	files   map[int]*diskFile
	byIno   map[uint64]int    // inode -> file
	synced  map[uint64][]byte // inode -> content at its last datasync
	cookies map[uint32]string // rename cookie -> the name moved from

	// The crash: inside the crashAt-th hook call (0: only when crash is
	// called).
	calls, crashAt int
	crashed        bool
	how            string // where the crash came
	img            *diskImage

	// checkDir, when set, runs at each directory sync before it takes
	// effect; what it returns is kept in violations.
	checkDir   func(d *powerDisk) []string
	violations []string
	// onCrash, when set, runs at the moment of the crash (with d.mu held).
	onCrash func()

	fileSyncs, dirSyncs int
	// Files whose content the simulation does not know: gone before a
	// drain saw them (they read as empty), or linked after their name had
	// been given to a newer file. Logged with a failure.
	unseen, mislinked int
}

// diskFile is one file (one inode) the disk has seen.
type diskFile struct {
	name string // its name when it was created
	link string // the shadow hard link; "" when the file was gone before it was seen
}

// dirOp is one directory operation: 'c' create name, 'r' remove name,
// 'm' rename name to to.
type dirOp struct {
	op       byte
	name, to string
	id       int
}

// diskImage is what the disk knew at the moment of the crash.
type diskImage struct {
	durable map[string]int
	pending []dirOp
	current map[int][]byte // page cache content of each file
	synced  map[int][]byte // content at its last datasync (absent: never)
}

func isCheckpointName(name string) bool {
	switch name {
	case metaName, cleanName, recoveryName, lockName:
		return true
	}
	return false
}

// newPowerDisk makes root/log (empty) and watches it. The log must be
// opened at the returned directory with Options.datasync = d.datasync; its
// directory syncs go through the same hook.
func newPowerDisk(t testing.TB, root string) *powerDisk {
	t.Helper()
	d := &powerDisk{
		dir: filepath.Join(root, "log"), shadow: filepath.Join(root, "shadow"),
		cur: map[string]int{}, durable: map[string]int{}, files: map[int]*diskFile{},
		byIno: map[uint64]int{}, synced: map[uint64][]byte{}, cookies: map[uint32]string{},
	}
	for _, p := range []string{d.dir, d.shadow} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	d.ifd = fd
	if _, err := unix.InotifyAddWatch(fd, d.dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		_ = unix.Close(fd)
		t.Fatalf("inotify watch: %v", err)
	}
	dirSyncHooks.Store(d.dir, d.datasync)
	t.Cleanup(d.close)
	return d
}

// close ends the watch (inotify instances are few: one case closes its
// own) and the routing of directory syncs.
func (d *powerDisk) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ifd >= 0 {
		dirSyncHooks.Delete(d.dir)
		_ = unix.Close(d.ifd)
		d.ifd = -1
	}
}

// drain applies the directory operations inotify has queued. The caller
// holds d.mu.
func (d *powerDisk) drain() {
	if d.ifd < 0 {
		return
	}
	buf := make([]byte, 64<<10)
	var created []int
	for {
		n, err := unix.Read(d.ifd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 {
			break
		}
		for p := 0; p+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[p+4:])
			cookie := binary.NativeEndian.Uint32(buf[p+8:])
			size := int(binary.NativeEndian.Uint32(buf[p+12:]))
			name := string(buf[p+unix.SizeofInotifyEvent : p+unix.SizeofInotifyEvent+size])
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			p += unix.SizeofInotifyEvent + size
			if id, ok := d.event(mask, cookie, name); ok {
				created = append(created, id)
			}
		}
	}
	if len(created) == 0 {
		return
	}
	names := map[int]string{}
	for name, id := range d.cur {
		names[id] = name
	}
	for _, id := range created {
		if name, ok := names[id]; ok {
			d.link(id, name)
		} else {
			d.unseen++
		}
	}
}

// event applies one inotify event; it returns the id of a file it created.
func (d *powerDisk) event(mask, cookie uint32, name string) (int, bool) {
	switch {
	case mask&unix.IN_Q_OVERFLOW != 0:
		d.violations = append(d.violations, "simulation: the inotify queue overflowed (directory operations lost)")
	case mask&unix.IN_ISDIR != 0:
	case mask&unix.IN_CREATE != 0:
		id := d.newFile(name)
		d.cur[name] = id
		d.pending = append(d.pending, dirOp{op: 'c', name: name, id: id})
		return id, true
	case mask&unix.IN_DELETE != 0:
		if id, ok := d.cur[name]; ok {
			delete(d.cur, name)
			d.pending = append(d.pending, dirOp{op: 'r', name: name, id: id})
		}
	case mask&unix.IN_MOVED_FROM != 0:
		d.cookies[cookie] = name
	case mask&unix.IN_MOVED_TO != 0:
		from, ok := d.cookies[cookie]
		delete(d.cookies, cookie)
		id, known := d.cur[from]
		if !ok || !known {
			id = d.newFile(name)
			d.cur[name] = id
			d.pending = append(d.pending, dirOp{op: 'c', name: name, id: id})
			return id, true
		}
		delete(d.cur, from)
		d.cur[name] = id
		d.pending = append(d.pending, dirOp{op: 'm', name: from, to: name, id: id})
		if isCheckpointName(name) {
			// internal/checkpoint syncs the directory right after the
			// rename: everything before it is durable.
			d.applyPending()
		}
	}
	return 0, false
}

func (d *powerDisk) newFile(name string) int {
	d.nextID++
	d.files[d.nextID] = &diskFile{name: name}
	return d.nextID
}

// link keeps the file now named name as file id. If another file already
// holds the same inode, that one was linked after its name had been given
// to this newer file: its own content is unknown.
func (d *powerDisk) link(id int, name string) {
	p := filepath.Join(d.shadow, strconv.Itoa(id))
	if err := os.Link(filepath.Join(d.dir, name), p); err != nil {
		d.unseen++
		return
	}
	ino, err := inodeOf(p)
	if err != nil {
		_ = os.Remove(p)
		d.unseen++
		return
	}
	if other, ok := d.byIno[ino]; ok && other != id {
		_ = os.Remove(d.files[other].link)
		d.files[other].link = ""
		d.mislinked++
	}
	d.byIno[ino] = id
	d.files[id].link = p
}

func inodeOf(path string) (uint64, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	return testkit.Inode(st), nil
}

// applyPending makes every pending operation durable.
func (d *powerDisk) applyPending() {
	applyDirOps(d.durable, d.pending)
	d.pending = nil
}

func applyDirOps(names map[string]int, ops []dirOp) {
	for _, o := range ops {
		switch o.op {
		case 'c':
			names[o.name] = o.id
		case 'r':
			delete(names, o.name)
		case 'm':
			delete(names, o.name)
			names[o.to] = o.id
		}
	}
}

// datasync is the hook: file syncs keep the file's content, directory syncs
// make the directory's operations durable.
func (d *powerDisk) datasync(f *os.File) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.crashed {
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	d.drain()
	d.calls++
	if st.IsDir() && d.checkDir != nil {
		d.violations = append(d.violations, d.checkDir(d)...)
	}
	if d.calls == d.crashAt {
		kind := "file"
		if st.IsDir() {
			kind = "directory"
		}
		d.crashLocked(fmt.Sprintf("inside hook call %d (a %s sync of %s)", d.calls, kind, filepath.Base(f.Name())))
		return nil
	}
	if st.IsDir() {
		d.dirSyncs++
		d.applyPending()
		return nil
	}
	d.fileSyncs++
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) { // EOF: a seal trimmed it meanwhile
		return fmt.Errorf("simulation: read %s to keep it: %w", f.Name(), err)
	}
	b = b[:n]
	d.synced[testkit.Inode(st)] = b
	return nil
}

// crash takes the picture of the disk now (between two operations).
func (d *powerDisk) crash(how string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.crashed {
		d.drain()
		d.crashLocked(how)
	}
}

func (d *powerDisk) isCrashed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.crashed
}

func (d *powerDisk) crashLocked(how string) {
	d.crashed, d.how = true, how
	if d.onCrash != nil {
		d.onCrash()
	}
	img := &diskImage{
		durable: maps.Clone(d.durable), pending: slices.Clone(d.pending),
		current: map[int][]byte{}, synced: map[int][]byte{},
	}
	ids := map[int]bool{}
	for _, id := range d.durable {
		ids[id] = true
	}
	for _, id := range d.cur {
		ids[id] = true
	}
	for _, o := range d.pending {
		ids[o.id] = true
	}
	for id := range ids {
		f := d.files[id]
		if f.link == "" {
			continue // never seen: it reads as an empty file
		}
		b, err := os.ReadFile(f.link)
		if err != nil {
			d.violations = append(d.violations, fmt.Sprintf("simulation: read %s: %v", f.link, err))
			continue
		}
		img.current[id] = b
		if ino, err := inodeOf(f.link); err == nil {
			if s, ok := d.synced[ino]; ok {
				img.synced[id] = s
			}
		}
	}
	d.img = img
}

// fileNow returns the current content of the file named name and its
// content at its last sync (ok false: never synced). The caller holds d.mu.
func (d *powerDisk) fileNow(name string) (now, synced []byte, ok bool) {
	id, there := d.cur[name]
	if !there || d.files[id].link == "" {
		return nil, nil, false
	}
	now, err := os.ReadFile(d.files[id].link)
	if err != nil {
		return nil, nil, false
	}
	ino, err := inodeOf(d.files[id].link)
	if err != nil {
		return now, nil, false
	}
	synced, ok = d.synced[ino]
	return now, synced, ok
}

// imageStats counts what the images were made of.
type imageStats struct {
	crashPowerStats
	images, opsKept, opsLost, filesLost, filesBack int
}

// build writes into cdir a disk the crash may have left: the directory as
// the last sync left it plus a prefix of the operations since, and each
// file's content torn between its last sync and the page cache. It returns
// a description of the directory state chosen.
func (img *diskImage) build(t *testing.T, rng *rand.Rand, cdir string, st *imageStats) string {
	t.Helper()
	if err := os.Mkdir(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := len(img.pending)
	switch rng.IntN(4) {
	case 0:
		k = 0
	case 1, 2:
		k = rng.IntN(len(img.pending) + 1)
	}
	names := maps.Clone(img.durable)
	applyDirOps(names, img.pending[:k])
	all := maps.Clone(img.durable)
	applyDirOps(all, img.pending)
	for name := range all {
		if _, ok := names[name]; !ok {
			st.filesLost++
		}
	}
	for name, id := range names {
		if all[name] != id {
			st.filesBack++
		}
	}
	st.images++
	st.opsKept += k
	st.opsLost += len(img.pending) - k
	var newest uint64
	for name := range names {
		if base, suffix, ok := segment.ParseName(name); ok && suffix == segment.LogSuffix {
			newest = max(newest, base)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		id := names[name]
		cur := img.current[id]
		out := cur
		if !isCheckpointName(name) {
			synced, ok := img.synced[id]
			if !ok {
				synced = nil
			}
			base, suffix, isSeg := segment.ParseName(name)
			out = crashSegmentFile(rng, synced, cur, isSeg && suffix == segment.LogSuffix && base == newest, &st.crashPowerStats)
		}
		crashWrite(t, filepath.Join(cdir, name), out)
	}
	return fmt.Sprintf("directory: %d of %d operations since the last directory sync kept", k, len(img.pending))
}

// report is a one-line summary for t.Log.
func (st *imageStats) report() string {
	return fmt.Sprintf("%d disk images: %d directory operations kept, %d lost (%d files gone, %d back or renamed back); "+
		"%d sectors new, %d old, %d zeroed, %d pages torn, %d files never synced, %d truncated to the synced size",
		st.images, st.opsKept, st.opsLost, st.filesLost, st.filesBack,
		st.SectorsNew, st.SectorsOld, st.SectorsZero, st.PagesTorn, st.Unsynced, st.Truncated)
}

// sealedSyncedBeforeSuccessor is a checkDir for SyncAlways: when a
// directory sync makes a segment's successor durable, the segment's three
// files must be synced as they stand (sealed: trimmed, with their index
// entries).
func sealedSyncedBeforeSuccessor(d *powerDisk) []string {
	var bases []uint64
	for name := range d.cur {
		if base, suffix, ok := segment.ParseName(name); ok && suffix == segment.LogSuffix {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	var out []string
	for i, base := range bases {
		if i == len(bases)-1 {
			break
		}
		for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
			name := segment.Name(base, suffix)
			if _, there := d.cur[name]; !there {
				continue
			}
			now, synced, ok := d.fileNow(name)
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("directory sync %d makes %s durable, but %s was never synced",
					d.calls, segment.Name(bases[i+1], segment.LogSuffix), name))
			case string(now) != string(synced):
				out = append(out, fmt.Sprintf("directory sync %d makes %s durable, but %s is %d bytes, synced at %d bytes (or other content)",
					d.calls, segment.Name(bases[i+1], segment.LogSuffix), name, len(now), len(synced)))
			}
		}
	}
	return out
}
