package engine

// The hostile-user suite: tests that try to break the log the way a careless
// or unlucky user would, and check only what the documentation promises.
//
//   - TestHostileFiles damages every file of a log directory in every way a
//     user can (flip a byte, empty, remove, cut in half, append garbage,
//     rename, leave stray files) and opens the result read-only, for
//     writing, and with Recover.
//   - TestHostileConcurrency calls every public method from many goroutines
//     while Close, DropBefore and Truncate run, writable and read-only.
//   - TestHostileSettings opens logs with extreme Options.
//
// Every check runs in a goroutine of its own with panic-on-fault set, so
// that a panic or a fault on a mapping (SIGBUS, SIGSEGV) becomes a failure
// of one case instead of the end of the test binary, and under a timeout,
// so that a hang becomes a failure too. Failures are collected and
// reported per case; nothing is skipped after the first.
//
// Run: go test -count=1 -run Hostile ./engine (add -race). HOSTILE_SEED
// repeats a run of TestHostileConcurrency.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/pagelog/pagelog/internal/record"
	"hash/crc32"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/mmapfile"
)

// ---------------------------------------------------------------------------
// Shared machinery.

// hostileFails collects the failures of one case (from any goroutine).
type hostileFails struct {
	mu   sync.Mutex
	msgs []string
	more int
}

const hostileMaxFails = 12

func (f *hostileFails) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.msgs) >= hostileMaxFails {
		f.more++
		return
	}
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *hostileFails) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.msgs)
	if f.more > 0 {
		out = append(out, fmt.Sprintf("... and %d more failures", f.more))
	}
	return out
}

// hostileGo runs fn in a goroutine with panic-on-fault set; a panic (or a
// fault on a mapping) is added to f.
func hostileGo(wg *sync.WaitGroup, f *hostileFails, who string, fn func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		debug.SetPanicOnFault(true)
		defer func() {
			if r := recover(); r != nil {
				f.add("%s: panic: %v\n%s", who, r, hostileStack())
			}
		}()
		fn()
	}()
}

// hostilePhase runs fn, turning a panic into a failure of f.
func hostilePhase(f *hostileFails, who string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			f.add("%s: panic: %v\n%s", who, r, hostileStack())
		}
	}()
	fn()
}

// hostileStack is the stack of a panic, from the frame that panicked.
func hostileStack() string {
	lines := strings.Split(string(debug.Stack()), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") {
			lines = lines[i+2:]
			break
		}
	}
	return "        " + strings.Join(lines[:min(len(lines), 12)], "\n        ")
}

// hostileRun runs fn as one case: in its own goroutine, with panic-on-fault,
// under a timeout. It returns the failures.
func hostileRun(timeout time.Duration, fn func(f *hostileFails)) []string {
	f := &hostileFails{}
	var wg sync.WaitGroup
	hostileGo(&wg, f, "case", func() { fn(f) })
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		f.add("timed out after %v: a hang or an endless loop; the engine's goroutines:\n%s", timeout, hostileEngineStacks())
	}
	return f.list()
}

// hostileRoot is a scratch directory for many small logs: under /dev/shm
// when it is there (the cases create thousands of files, and the damage
// under test does not depend on the file system), else the test's temporary
// directory; HOSTILE_DIR chooses another parent (a disk, say).
func hostileRoot(t *testing.T) string {
	parent := os.Getenv("HOSTILE_DIR")
	if parent == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			parent = "/dev/shm"
		}
	}
	if parent != "" {
		if dir, err := os.MkdirTemp(parent, "pagelog-hostile-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			t.Logf("scratch directory %s", dir)
			return dir
		}
	}
	return t.TempDir()
}

// hostileCopyDir copies the regular files of src into dst (created).
func hostileCopyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			// Renamed since the listing by a live log's checkpointer
			// (its .tmp): as a crash between the two would leave it.
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// hostileHash returns name -> size, mode and SHA-256 of every entry of dir.
func hostileHash(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		h := fmt.Sprintf("%v %d", info.Mode(), info.Size())
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			h += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[e.Name()] = h
	}
	return out, nil
}

func hostileDiff(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, k+" removed")
		} else if w != v {
			d = append(d, k+" changed")
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, k+" added")
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}

// hostileChecksum is the CRC-32C a record without attributes stores: over
// its id and body.
func hostileChecksum(off uint64, body []byte) uint32 {
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], off)
	return crc32.Update(crc32.Checksum(id[:], record.Table), record.Table, body)
}

// ---------------------------------------------------------------------------
// TestHostileFiles.
//
// The template: 8 KiB segments, IndexIntervalBytes 256, MaxRecordBytes 8000
// (so that the active file is preallocated to 8 KiB, not 1 MiB), about a
// hundred records of mixedSize bodies (testBody), at least 6 segments. The
// log is synced, and log.recovery written, 5 records before the end: those
// 5 records lie past the recovery point (the "tail zone"), and the recovery
// point lies past the middle of the newest file, so that cutting it in half
// cuts below the point. Two variants: "clean" (closed: log.clean is there)
// and "unclean" (copied while the writer was still open: no log.clean, the
// active files preallocated, as kill -9 leaves them). Sealed segments are
// the same files in both, so the unclean variant runs the cases of the
// newest segment, the checkpoint files and the stray files only.
//
// Every file is damaged every way: each .log, .index, .timeindex of the
// first, a middle, the second-newest and the newest segment, log.meta,
// log.clean, log.recovery, LOCK; a byte flipped in the middle, at byte 1
// (a record's length) and at byte 10 (its id), the file emptied, removed,
// cut in half, 100 bytes of garbage appended, a .log renamed to its base+7;
// for the newest .log also a byte flipped in the tail zone, a byte flipped
// in the zeros past the records, and a cut just below the recovery point;
// and stray files. Each damaged directory is opened with OpenReadOnly, with
// Open (then appended to, closed and read again read-only) and with
// Recover (then read read-only).
//
// Expectations ("touched" = the records whose bytes the damage changed, or
// all of a segment's records for remove, empty and rename; RO/Open/Recover =
// what Verify says after OpenReadOnly, after Open, and Recover's After):
//
//	file / damage                               untouched records   RO        Open      Recover
//	sealed .log: flip, empty, remove, halve,     all served         unhealthy unhealthy unhealthy
//	  garbage appended
//	sealed .log removed or emptied (not first)   its offsets ErrCorrupt, reported once as a missing
//	                                             range by Records, Inspect (Missing>0), Verify (Missing)
//	first .log removed                           all served         unhealthy any (*)   any (*)
//	.log renamed to base+7                       all served         unhealthy unhealthy healthy, nothing lost
//	  (newest: writable Open refuses with ErrMisnamed)
//	newest .log, damage below the recovery point all served         unhealthy unhealthy unhealthy
//	  (records past the point that the damage reaches may be cut: a torn tail)
//	newest .log, damage only at or past the      records before it  any       any       any
//	  recovery point (a torn tail by the documented rule): the cut must show in Recovery or Verify
//	newest .log, bytes past its records only     all served         any       any       any
//	.index / .timeindex: any damage              all served         index(**) healthy   healthy
//	log.meta: any damage                         all served         index(**) healthy   healthy
//	log.clean, log.recovery, LOCK: any damage    all served         healthy   healthy   healthy
//	stray .index/.timeindex without a .log       all served         unhealthy healthy   healthy
//	stray .log.tmp, log.meta.tmp                 all served         healthy   healthy   healthy
//	stray empty .log past the end                all served         any       any       any
//
// (*) once Open has removed the leftover index files, a log whose first
// segment file was removed is indistinguishable from one that DropBefore
// trimmed. (**) only IndexProblems allowed: no damaged, missing or other
// problem.
//
// Always, for every opener: no panic, no fault, no hang; Read, Records and
// Inspect never serve a record whose bytes differ from what was appended at
// its offset (Inspect: size and checksum); a read error in [First, Next) is
// ErrCorrupt, outside it ErrNotFound; a read-only open changes no file and
// refuses writes with ErrReadOnly; OffsetForTime never answers late (unless
// the time index was damaged); Verify counts as many good records as
// Inspect shows; Next never drops below an offset appended below the
// recovery point (or untouched) without Verify saying so, and a writable
// open never does at all (the next append would reuse the offset); the next
// append gets Next; Recover's verdict agrees with a read-only Verify after
// it.

const (
	hostileSegBytes = 8192
	hostileInterval = 256
	hostileMaxRec   = 8000
	hostileTail     = 5 // records appended after the recovery point
)

type hostileTpl struct {
	name   string
	dir    string
	n      uint64
	sizes  []int       // body lengths
	bodies [][]byte    // testBody of each record
	segs   []segLayout // whole record sizes, by the roll rule
	rp     recoveryPoint
	t0     time.Time // before the first append
	midT   time.Time // before the append of midOff
	mid    uint64
	clean  bool
}

func (tp *hostileTpl) body(off uint64) []byte { return tp.bodies[off] }

// hostileTemplates builds the clean and the unclean template under root.
func hostileTemplates(t *testing.T, root string) []*hostileTpl {
	t.Helper()
	var whole []int
	n := 0
	for {
		whole = append(whole, headerSize+mixedSize(uint64(n)))
		n++
		if n >= 100 {
			// At least 6 segments; in the newest, at least 7 records
			// below the recovery point (5 records before the end), and
			// the recovery point past the middle of the 8 KiB file, so
			// that cutting the file in half cuts below it.
			segs := layout(0, whole, hostileSegBytes)
			newest := segs[len(segs)-1]
			if k := n - hostileTail - int(newest.base); len(segs) >= 6 && k >= 7 && newest.positions()[k] > hostileSegBytes/2+200 {
				break
			}
		}
		if n > 5000 {
			t.Fatal("no template layout found")
		}
	}
	dir := filepath.Join(root, "clean")
	l, err := Open(dir, Options{SegmentBytes: hostileSegBytes, IndexIntervalBytes: hostileInterval, MaxRecordBytes: hostileMaxRec})
	if err != nil {
		t.Fatal(err)
	}
	clean := &hostileTpl{name: "clean", dir: dir, n: uint64(n), mid: uint64(n / 2), clean: true}
	clean.t0 = time.Now()
	for off := uint64(0); off < uint64(n); off++ {
		if off == clean.mid {
			clean.midT = time.Now()
		}
		body := testBody(off, mixedSize(off))
		if got, err := l.Append(body); err != nil || got != off {
			t.Fatalf("template Append: %d, %v; want %d", got, err, off)
		}
		clean.sizes = append(clean.sizes, len(body))
		clean.bodies = append(clean.bodies, body)
		if off+1 == uint64(n-hostileTail) {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			// What the checkpointer writes after a sync (SyncInterval and
			// SyncAlways logs): the recovery point.
			clean.rp = l.sync.recoveryPoint()
			if err := replaceFile(dir, recoveryName, clean.rp.encode(), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	unclean := *clean
	unclean.name, unclean.dir, unclean.clean = "unclean", filepath.Join(root, "unclean"), false
	// The writer is still open: the copy is taken while its background
	// work (a preparer, a roll naming its index files) leaves the files
	// as they stand, as a kill -9 then would.
	if !whenQuiet(l, func() { err = hostileCopyDir(dir, unclean.dir) }) {
		t.Fatal("the log's background work never went quiet")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	clean.segs = checkLayout(t, dir, 0, whole, hostileSegBytes)
	unclean.segs = clean.segs
	newest := clean.segs[len(clean.segs)-1]
	if clean.rp.Base != newest.base || clean.rp.Next != uint64(n-hostileTail) || clean.rp.Pos <= 0 {
		t.Fatalf("recovery point %+v, newest segment at %d", clean.rp, newest.base)
	}
	for _, name := range []string{cleanName, recoveryName, metaName, lockName} {
		_, errC := os.Stat(filepath.Join(clean.dir, name))
		_, errU := os.Stat(filepath.Join(unclean.dir, name))
		if errC != nil || (errU == nil) != (name != cleanName) {
			t.Fatalf("template files: %s: clean %v, unclean %v", name, errC, errU)
		}
	}
	t.Logf("template: %d records, %d segments (bases %v), recovery point %+v", n, len(clean.segs),
		func() []uint64 {
			var b []uint64
			for _, s := range clean.segs {
				b = append(b, s.base)
			}
			return b
		}(), clean.rp)
	return []*hostileTpl{clean, &unclean}
}

// health is what Verify must say.
type health int

const (
	hAny       health = iota // either
	hHealthy                 // Healthy()
	hIndexOnly               // nothing but IndexProblems
	hUnhealthy               // !Healthy()
)

func (h health) String() string {
	return [...]string{"any", "healthy", "healthy but for index problems", "not healthy"}[h]
}

func (h health) check(f *hostileFails, who string, rep VerifyReport) {
	bad := func() {
		f.add("%s: Verify: want %v; got Healthy=%v damaged %d missing %d problems %q index problems %q",
			who, h, rep.Healthy(), rep.Damaged, rep.Missing, hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
	}
	switch h {
	case hHealthy:
		if !rep.Healthy() {
			bad()
		}
	case hIndexOnly:
		if rep.Damaged != 0 || rep.Missing != 0 || len(rep.Problems) != 0 {
			bad()
		}
	case hUnhealthy:
		if rep.Healthy() {
			bad()
		}
	}
}

func hostileShort(s []string) []string {
	if len(s) > 3 {
		return append(slices.Clone(s[:3]), fmt.Sprintf("... %d more", len(s)-3))
	}
	return s
}

// hostileExp is what one damaged directory must give.
type hostileExp struct {
	touched          map[uint64]bool // records the damage touched: may be unreadable
	loseFrom         uint64          // offsets from here on may be lost (torn tail); n when none
	missFrom, missTo uint64          // a range to be reported once as missing (missTo 0: none)
	ro, open, rec    health
	openErr          error // writable Open must fail with this (nil: must succeed)
	renamed          bool  // Recover renames the file back: nothing is lost after it
	timesOK          bool  // the time index is intact: OffsetForTime must not answer late
	nextMayGrow      bool  // Next may exceed n (a stray .log past the end)
	note             string
}

type hostileCase struct {
	name   string
	damage func(dir string) error
	exp    hostileExp
}

// Damage kinds.
const (
	dFlipMid = "flip-middle"
	dFlip1   = "flip-byte-1"
	dFlip10  = "flip-byte-10"
	dEmpty   = "empty"
	dRemove  = "remove"
	dHalve   = "cut-in-half"
	dGarbage = "append-garbage"
	dRename  = "rename-base+7"
)

var hostileDamages = []string{dFlipMid, dFlip1, dFlip10, dEmpty, dRemove, dHalve, dGarbage}

// hostileDamage returns the damage, and the byte range [a, b) of the file
// it changes (b = size+100 for garbage); ok is false when it does not apply
// to a file of this size.
func hostileDamage(name, kind string, size int64) (fn func(dir string) error, a, b int64, ok bool) {
	flip := func(pos int64) func(dir string) error {
		return func(dir string) error {
			p := filepath.Join(dir, name)
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data[pos] ^= 0x5a
			return os.WriteFile(p, data, 0o600)
		}
	}
	switch kind {
	case dFlipMid:
		if size == 0 {
			return nil, 0, 0, false
		}
		return flip(size / 2), size / 2, size/2 + 1, true
	case dFlip1, dFlip10:
		pos := int64(1)
		if kind == dFlip10 {
			pos = 10
		}
		if size <= pos {
			return nil, 0, 0, false
		}
		return flip(pos), pos, pos + 1, true
	case dEmpty:
		if size == 0 {
			return nil, 0, 0, false
		}
		return func(dir string) error { return os.Truncate(filepath.Join(dir, name), 0) }, 0, size, true
	case dRemove:
		return func(dir string) error { return os.Remove(filepath.Join(dir, name)) }, 0, size, true
	case dHalve:
		if size < 2 {
			return nil, 0, 0, false
		}
		return func(dir string) error { return os.Truncate(filepath.Join(dir, name), size/2) }, size / 2, size, true
	case dGarbage:
		return func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			g := make([]byte, 100)
			rng := rand.New(rand.NewPCG(uint64(size), 7))
			for i := range g {
				g[i] = byte(rng.UintN(255) + 1)
			}
			_, err = f.Write(g)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}, size, size + 100, true
	}
	panic(kind)
}

// hostileCases lists every case for a template.
func hostileCases(t *testing.T, tp *hostileTpl) []hostileCase {
	t.Helper()
	var cases []hostileCase
	size := func(name string) (int64, bool) {
		st, err := os.Stat(filepath.Join(tp.dir, name))
		if err != nil {
			return 0, false
		}
		return st.Size(), true
	}
	last := len(tp.segs) - 1
	roles := []struct {
		role string
		i    int
	}{{"first", 0}, {"middle", last / 2}, {"second-newest", last - 1}, {"newest", last}}
	for _, r := range roles {
		if !tp.clean && r.role != "newest" {
			// Sealed segments are the same files in both templates:
			// their cases run once, on the clean one.
			continue
		}
		seg := tp.segs[r.i]
		for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
			name := segment.Name(seg.base, suffix)
			sz, ok := size(name)
			if !ok {
				t.Fatalf("template %s lacks %s", tp.name, name)
			}
			kinds := hostileDamages
			if suffix == segment.LogSuffix {
				kinds = append(slices.Clone(kinds), dRename)
			}
			for _, kind := range kinds {
				label := fmt.Sprintf("%s-%s/%s", r.role, strings.TrimPrefix(suffix, "."), kind)
				if kind == dRename {
					from, to := name, segment.Name(seg.base+7, segment.LogSuffix)
					cases = append(cases, hostileCase{label, func(dir string) error {
						return os.Rename(filepath.Join(dir, from), filepath.Join(dir, to))
					}, tp.logExp(r.i, kind, 0, 0)})
					continue
				}
				fn, a, b, ok := hostileDamage(name, kind, sz)
				if !ok {
					continue
				}
				var exp hostileExp
				if suffix == segment.LogSuffix {
					exp = tp.logExp(r.i, kind, a, b)
				} else {
					exp = tp.plainExp(hIndexOnly, hHealthy, hHealthy)
					exp.timesOK = suffix != segment.TimeIndexSuffix
				}
				cases = append(cases, hostileCase{label + fmt.Sprintf("@%d", a), fn, exp})
			}
		}
	}
	for _, name := range []string{metaName, cleanName, recoveryName, lockName} {
		sz, ok := size(name)
		if !ok {
			continue
		}
		for _, kind := range hostileDamages {
			fn, a, _, ok := hostileDamage(name, kind, sz)
			if !ok {
				continue
			}
			exp := tp.plainExp(hHealthy, hHealthy, hHealthy)
			if name == metaName {
				exp.ro = hIndexOnly
			}
			cases = append(cases, hostileCase{fmt.Sprintf("%s/%s@%d", name, kind, a), fn, exp})
		}
	}
	write := func(name string, data []byte) func(dir string) error {
		return func(dir string) error { return os.WriteFile(filepath.Join(dir, name), data, 0o600) }
	}
	newest := tp.segs[last]
	newestName := segment.Name(newest.base, segment.LogSuffix)
	newestLog, err := os.ReadFile(filepath.Join(tp.dir, newestName))
	if err != nil {
		t.Fatal(err)
	}
	// Damage aimed at the newest segment's recovery rules.
	flipAt := func(pos int64) func(dir string) error {
		return func(dir string) error {
			p := filepath.Join(dir, newestName)
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data[pos] ^= 0x5a
			return os.WriteFile(p, data, 0o600)
		}
	}
	npos := newest.positions()
	tailRec := int(tp.n - 2 - newest.base)
	tailAt := npos[tailRec] + int64(newest.sizes[tailRec])/2
	zeroAt := newest.bytes() + 50
	cutAt := tp.rp.Pos - 7
	cases = append(cases,
		hostileCase{fmt.Sprintf("newest-log/flip-past-the-recovery-point@%d", tailAt), flipAt(tailAt), tp.logExp(last, dFlipMid, tailAt, tailAt+1)},
		hostileCase{fmt.Sprintf("newest-log/flip-past-the-records@%d", zeroAt), flipAt(zeroAt), tp.logExp(last, dFlipMid, zeroAt, zeroAt+1)},
		hostileCase{fmt.Sprintf("newest-log/cut-below-the-recovery-point@%d", cutAt), func(dir string) error {
			return os.Truncate(filepath.Join(dir, newestName), cutAt)
		}, tp.logExp(last, dHalve, cutAt, int64(len(newestLog)))},
	)
	stray := []hostileCase{
		{"stray/index-at-next-offset", write(segment.Name(tp.n, segment.IndexSuffix), encodeEntries([][2]uint32{{1, 100}, {2, 300}})),
			tp.plainExp(hUnhealthy, hHealthy, hHealthy)},
		{"stray/timeindex-inside-a-segment", write(segment.Name(tp.segs[2].base+3, segment.TimeIndexSuffix), make([]byte, 24)),
			tp.plainExp(hUnhealthy, hHealthy, hHealthy)},
		{"stray/log.tmp", write(segment.Name(newest.base, segment.LogSuffix)+".tmp", newestLog),
			tp.plainExp(hHealthy, hHealthy, hHealthy)},
		{"stray/log.meta.tmp", write(metaName+".tmp", bytes.Repeat([]byte{0xa5}, metaSize)),
			tp.plainExp(hHealthy, hHealthy, hHealthy)},
		{"stray/empty-log-past-the-end", write(segment.Name(tp.n+100, segment.LogSuffix), nil),
			tp.plainExp(hAny, hAny, hAny)},
	}
	stray[len(stray)-1].exp.nextMayGrow = true
	return append(cases, stray...)
}

// plainExp: nothing touched, nothing may be lost.
func (tp *hostileTpl) plainExp(ro, open, rec health) hostileExp {
	return hostileExp{touched: map[uint64]bool{}, loseFrom: tp.n, ro: ro, open: open, rec: rec, timesOK: true}
}

// logExp is the expectation for damage to bytes [a, b) of segment i's .log.
func (tp *hostileTpl) logExp(i int, kind string, a, b int64) hostileExp {
	seg := tp.segs[i]
	newest := i == len(tp.segs)-1
	exp := tp.plainExp(hUnhealthy, hUnhealthy, hUnhealthy)
	pos := seg.positions()
	var first int64 = -1 // position of the first touched record
	for j, p := range pos {
		end := p + int64(seg.sizes[j])
		if kind == dRename || p < b && end > a {
			exp.touched[seg.base+uint64(j)] = true
			if first < 0 {
				first = p
			}
		}
	}
	switch kind {
	case dRename:
		exp.renamed = true
		exp.rec = hHealthy
		if newest {
			exp.openErr = ErrMisnamed
		}
		return exp
	case dRemove, dEmpty:
		if !newest && (i > 0 || kind == dEmpty) {
			exp.missFrom, exp.missTo = seg.base, tp.segs[i+1].base
		}
		if kind == dRemove && i == 0 {
			exp.open, exp.rec = hAny, hAny
			exp.note = "a removed first segment is indistinguishable from DropBefore once the leftover index files are gone"
		}
	}
	if newest {
		// From the first touched record at or past the recovery point on,
		// a torn tail may be cut.
		for off := tp.rp.Next; off < tp.n; off++ {
			if exp.touched[off] {
				exp.loseFrom = off
				break
			}
		}
		switch {
		case first < 0:
			exp.ro, exp.open, exp.rec = hAny, hAny, hAny
			exp.note = "only bytes past the newest segment's records changed: a torn tail by the documented rule"
		case first >= tp.rp.Pos:
			exp.loseFrom = seg.base + uint64(slices.Index(pos, first))
			exp.ro, exp.open, exp.rec = hAny, hAny, hAny
			exp.note = "damage at or past the recovery point: a torn tail by the documented rule"
		}
	}
	return exp
}

func TestHostileFiles(t *testing.T) {
	start := time.Now()
	root := hostileRoot(t)
	tpls := hostileTemplates(t, root)
	type job struct {
		tp    *hostileTpl
		c     hostileCase
		dir   string
		fails []string
		took  time.Duration
	}
	var jobs []*job
	for _, tp := range tpls {
		for ci, c := range hostileCases(t, tp) {
			jobs = append(jobs, &job{tp: tp, c: c, dir: filepath.Join(root, fmt.Sprintf("%s-%03d", tp.name, ci))})
		}
	}
	// Cases are independent directories: run a few at once (they wait on
	// fsync much of the time).
	work := make(chan *job)
	var wg sync.WaitGroup
	for range hostileWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				cs := time.Now()
				j.fails = hostileRun(60*time.Second, func(f *hostileFails) { hostileFileCase(f, j.tp, j.c, j.dir) })
				j.took = time.Since(cs)
				_ = os.RemoveAll(j.dir)
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	failed := 0
	for _, j := range jobs {
		if os.Getenv("HOSTILE_TIMING") != "" {
			t.Logf("TIMING %v %s/%s", j.took.Round(time.Millisecond), j.tp.name, j.c.name)
		}
		if len(j.fails) == 0 {
			continue
		}
		failed++
		exp := fmt.Sprintf("want: RO %v, Open %v, Recover %v", j.c.exp.ro, j.c.exp.open, j.c.exp.rec)
		if j.c.exp.note != "" {
			exp += "; " + j.c.exp.note
		}
		t.Errorf("%s/%s (%s):\n    %s", j.tp.name, j.c.name, exp, strings.Join(j.fails, "\n    "))
	}
	t.Logf("%d cases, %d failed, in %v", len(jobs), failed, time.Since(start).Round(time.Millisecond))
}

// hostileWant is what a check of an open log compares against.
type hostileWant struct {
	tp    *hostileTpl
	exp   hostileExp
	extra map[uint64][]byte // records appended after the damage
}

func (w *hostileWant) body(off uint64) ([]byte, bool) {
	if b, ok := w.extra[off]; ok {
		return b, true
	}
	if off < w.tp.n {
		return w.tp.body(off), true
	}
	return nil, false
}

// protected: a record that must be served.
func (w *hostileWant) protected(off uint64) bool {
	if _, ok := w.extra[off]; ok {
		return true
	}
	return off < w.tp.n && !w.exp.touched[off] && off < w.exp.loseFrom
}

func (w *hostileWant) inMissing(off uint64) bool {
	return w.exp.missTo > 0 && off >= w.exp.missFrom && off < w.exp.missTo
}

// minNext is the lowest Next that loses no record the damage did not take
// by the torn-tail rule.
func (w *hostileWant) minNext() uint64 { return min(w.tp.n, w.exp.loseFrom) }

func hostileFileCase(f *hostileFails, tp *hostileTpl, c hostileCase, caseDir string) {
	damaged := filepath.Join(caseDir, "damaged")
	if err := hostileCopyDir(tp.dir, damaged); err != nil {
		f.add("setup: %v", err)
		return
	}
	if err := c.damage(damaged); err != nil {
		f.add("setup: damage: %v", err)
		return
	}
	want := &hostileWant{tp: tp, exp: c.exp}

	// OpenReadOnly: serves what is there, changes nothing.
	hostilePhase(f, "read-only", func() {
		before, err := hostileHash(damaged)
		if err != nil {
			f.add("setup: %v", err)
			return
		}
		l, err := OpenReadOnly(damaged, Options{})
		if err != nil {
			f.add("OpenReadOnly: %v", err)
			return
		}
		rep := hostileCheck(f, "read-only", l, want)
		c.exp.ro.check(f, "read-only", rep)
		hostileLossReported(f, "read-only", l, want, rep)
		for _, w := range []struct {
			what string
			err  error
		}{
			{"Append", func() error { _, err := l.Append([]byte("x")); return err }()},
			{"Truncate", l.Truncate(l.First())},
			{"DropBefore", func() error { _, err := l.DropBefore(l.Next()); return err }()},
			{"Sync", l.Sync()},
		} {
			if !errors.Is(w.err, ErrReadOnly) {
				f.add("read-only: %s: %v, want ErrReadOnly", w.what, w.err)
			}
		}
		if err := l.Close(); err != nil {
			f.add("read-only: Close: %v", err)
		}
		after, err := hostileHash(damaged)
		if err != nil {
			f.add("read-only: %v", err)
		} else if d := hostileDiff(before, after); d != "" {
			f.add("read-only: the directory changed: %s", d)
		}
	})

	// Open for writing.
	hostilePhase(f, "writable", func() {
		dir := filepath.Join(caseDir, "open")
		if err := hostileCopyDir(damaged, dir); err != nil {
			f.add("setup: %v", err)
			return
		}
		l, err := Open(dir, Options{})
		if c.exp.openErr != nil {
			if !errors.Is(err, c.exp.openErr) {
				f.add("Open: %v, want an error matching %v", err, c.exp.openErr)
			}
			if err == nil {
				_ = l.Close()
			}
			return
		}
		if err != nil {
			f.add("Open: %v", err)
			return
		}
		rep := hostileCheck(f, "writable", l, want)
		c.exp.open.check(f, "writable", rep)
		hostileLossReported(f, "writable", l, want, rep)
		next := l.Next()
		if next < want.minNext() {
			f.add("writable: Next is %d after Open, but records up to %d were appended and only %d on may be lost: the next append reuses offset %d (recovery %s)",
				next, tp.n, want.minNext(), next, hostileRecovery(l.Recovery()))
		}
		body := testBody(next+1<<40, 33)
		off, err := l.Append(body)
		if err != nil || off != next {
			f.add("writable: Append after Open: offset %d, %v; want offset %d", off, err, next)
			_ = l.Close()
			return
		}
		want2 := &hostileWant{tp: tp, exp: c.exp, extra: map[uint64][]byte{off: body}}
		if r, err := l.Read(off); err != nil || !bytes.Equal(r.Body, body) {
			f.add("writable: Read(%d) of the record just appended: %v", off, err)
		} else {
			r.Release()
		}
		if err := l.Close(); err != nil {
			f.add("writable: Close: %v", err)
		}
		if off < want.minNext() {
			return // reported above; what follows would repeat it
		}
		ro, err := OpenReadOnly(dir, Options{})
		if err != nil {
			f.add("writable, then read-only: OpenReadOnly: %v", err)
			return
		}
		hostileCheckMode(f, "writable, then read-only", ro, want2, false)
		_ = ro.Close()
	})

	// Recover.
	hostilePhase(f, "Recover", func() {
		dir := filepath.Join(caseDir, "recover")
		if err := hostileCopyDir(damaged, dir); err != nil {
			f.add("setup: %v", err)
			return
		}
		rep, err := Recover(dir, Options{}, RecoverOptions{})
		if err != nil {
			f.add("Recover: %v", err)
			return
		}
		c.exp.rec.check(f, "Recover's After", rep.After)
		exp := c.exp
		if exp.renamed {
			if len(rep.Renamed) != 1 {
				f.add("Recover: renamed %q, want the renamed file renamed back", rep.Renamed)
			}
			exp.touched, exp.loseFrom = map[uint64]bool{}, tp.n
		}
		ro, err := OpenReadOnly(dir, Options{})
		if err != nil {
			f.add("Recover, then read-only: OpenReadOnly: %v", err)
			return
		}
		w := &hostileWant{tp: tp, exp: exp}
		v := hostileCheck(f, "Recover, then read-only", ro, w)
		if v.Healthy() != rep.After.Healthy() {
			f.add("Recover said healthy=%v, a read-only Verify after it says healthy=%v (problems %q, index problems %q)",
				rep.After.Healthy(), v.Healthy(), hostileShort(v.Problems), hostileShort(v.IndexProblems))
		}
		hostileLossReported(f, "Recover, then read-only", ro, w, v)
		_ = ro.Close()
	})
}

func hostileRecovery(r Recovery) string {
	return fmt.Sprintf("{segments %d, active %s cut=%v end=%d next=%d torn=%d, notes %q}",
		r.Segments, r.Active.Segment, r.Active.Cut, r.Active.End, r.Active.Next, r.TruncatedBytes, r.Notes)
}

// hostileLossReported: when Next lies below what was appended, the loss must
// show: in Verify, or as a cut in the recovery report.
func hostileLossReported(f *hostileFails, who string, l *Log, w *hostileWant, rep VerifyReport) {
	if next := l.Next(); next < w.tp.n && rep.Healthy() && !l.Recovery().Active.Cut && l.Recovery().TruncatedBytes == 0 {
		f.add("%s: Next is %d but %d records were appended, and neither Verify nor the recovery report says so (recovery %s)",
			who, next, w.tp.n, hostileRecovery(l.Recovery()))
	}
	if next := l.Next(); next < w.minNext() && rep.Healthy() {
		f.add("%s: records [%d, %d) (below the recovery point, or untouched) are gone and Verify says healthy",
			who, next, w.minNext())
	}
}

// hostileCheck reads everything through Read, Records, Inspect, Verify and
// OffsetForTime and checks it against w. It returns the Verify report.
func hostileCheck(f *hostileFails, who string, l *Log, w *hostileWant) VerifyReport {
	return hostileCheckMode(f, who, l, w, true)
}

// hostileCheckMode: full false checks Read and Verify only.
func hostileCheckMode(f *hostileFails, who string, l *Log, w *hostileWant, full bool) VerifyReport {
	tp := w.tp
	first, next := l.First(), l.Next()
	if first > next {
		f.add("%s: First %d > Next %d", who, first, next)
	}
	top := tp.n + uint64(len(w.extra))
	if next > top && !w.exp.nextMayGrow {
		f.add("%s: Next is %d, but only %d records were appended", who, next, top)
	}

	// Read.
	var notServed []uint64
	offs := []uint64{math.MaxUint64, math.MaxUint64 - 1, 1 << 63, next + 7}
	for off := uint64(0); off < max(next, top)+3; off++ {
		offs = append(offs, off)
	}
	for _, off := range offs {
		r, err := l.Read(off)
		if err == nil {
			body, ok := w.body(off)
			if !ok || r.Offset != off || !bytes.Equal(r.Body, body) {
				f.add("%s: Read(%d) served %d bytes that are not the record appended at %d", who, off, len(r.Body), off)
			}
			c := r
			r.Release()
			r.Release()
			c.Release()
			continue
		}
		switch {
		case off >= first && off < next && !errors.Is(err, ErrCorrupt):
			f.add("%s: Read(%d) in [First %d, Next %d): %v, want ErrCorrupt", who, off, first, next, err)
		case (off < first || off >= next) && !errors.Is(err, ErrNotFound):
			f.add("%s: Read(%d) outside [First %d, Next %d): %v, want ErrNotFound", who, off, first, next, err)
		case w.inMissing(off) && !errors.Is(err, ErrCorrupt):
			f.add("%s: Read(%d) of a removed segment's offset: %v, want ErrCorrupt", who, off, err)
		}
		if w.protected(off) {
			notServed = append(notServed, off)
			if len(notServed) <= 3 {
				f.add("%s: Read(%d) of a record the damage did not touch: %v", who, off, err)
			}
		}
	}
	if len(notServed) > 3 {
		f.add("%s: Read refused %d untouched records in all: %v", who, len(notServed), hostileRanges(notServed))
	}

	if !full {
		rep, err := l.Verify(nil)
		if err != nil {
			f.add("%s: Verify: %v", who, err)
		}
		return rep
	}

	// Records.
	served := map[uint64]bool{}
	last, yields, missErrs := int64(-1), 0, 0
	for r, err := range l.Records(0) {
		if yields++; yields > int(top)+200 {
			f.add("%s: Records yielded %d items for %d records: it does not end", who, yields, top)
			break
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
				f.add("%s: Records at %d: %v, want ErrCorrupt or ErrNotFound", who, r.Offset, err)
			}
			if w.inMissing(r.Offset) {
				missErrs++
			}
			continue
		}
		if int64(r.Offset) <= last {
			f.add("%s: Records yielded offset %d after %d", who, r.Offset, last)
		}
		last = int64(r.Offset)
		if body, ok := w.body(r.Offset); !ok || !bytes.Equal(r.Body, body) {
			f.add("%s: Records served %d bytes at %d that are not the record appended there", who, len(r.Body), r.Offset)
		}
		served[r.Offset] = true
	}
	var lost []uint64
	for off := uint64(0); off < top; off++ {
		if w.protected(off) && !served[off] {
			lost = append(lost, off)
		}
	}
	if len(lost) > 0 {
		f.add("%s: Records did not serve %d untouched records: %v", who, len(lost), hostileRanges(lost))
	}
	if w.exp.missTo > 0 && missErrs != 1 {
		f.add("%s: Records reported the missing range [%d, %d) %d times, want once", who, w.exp.missFrom, w.exp.missTo, missErrs)
	}

	// Inspect.
	good := map[uint64]bool{}
	last, yields = -1, 0
	missInfos := 0
	for ri := range l.Inspect(0) {
		if yields++; yields > int(top)+200 {
			f.add("%s: Inspect yielded %d items for %d records: it does not end", who, yields, top)
			break
		}
		if int64(ri.Offset) <= last {
			f.add("%s: Inspect yielded offset %d after %d", who, ri.Offset, last)
		}
		last = int64(ri.Offset)
		if ri.Missing > 0 {
			last = int64(ri.Offset + ri.Missing - 1)
			if w.inMissing(ri.Offset) {
				missInfos++
				if ri.Offset != w.exp.missFrom || ri.Missing != w.exp.missTo-w.exp.missFrom {
					f.add("%s: Inspect: missing range %d+%d, want [%d, %d)", who, ri.Offset, ri.Missing, w.exp.missFrom, w.exp.missTo)
				}
			}
			continue
		}
		if w.inMissing(ri.Offset) {
			missInfos += 100 // reported per record
		}
		if !ri.OK {
			if ri.Err == nil {
				f.add("%s: Inspect: offset %d not OK, without a reason", who, ri.Offset)
			}
			continue
		}
		body, ok := w.body(ri.Offset)
		if !ok || ri.Size != int64(headerSize+len(body)) || ri.Checksum != hostileChecksum(ri.Offset, body) {
			f.add("%s: Inspect calls offset %d OK with size %d checksum %08x: not the record appended there", who, ri.Offset, ri.Size, ri.Checksum)
		}
		good[ri.Offset] = true
	}
	lost = lost[:0]
	for off := uint64(0); off < top; off++ {
		if w.protected(off) && !good[off] {
			lost = append(lost, off)
		}
	}
	if len(lost) > 0 {
		f.add("%s: Inspect does not call %d untouched records OK: %v", who, len(lost), hostileRanges(lost))
	}
	if w.exp.missTo > 0 && missInfos != 1 {
		f.add("%s: Inspect reported the missing range [%d, %d) as %d items (100 per record reported alone), want one with Missing set",
			who, w.exp.missFrom, w.exp.missTo, missInfos)
	}

	// Verify.
	rep, err := l.Verify(nil)
	if err != nil {
		f.add("%s: Verify: %v", who, err)
	}
	if rep.Records != uint64(len(good)) {
		f.add("%s: Verify counts %d good records, Inspect shows %d", who, rep.Records, len(good))
	}
	if w.exp.missTo > 0 {
		if rep.Missing != w.exp.missTo-w.exp.missFrom || rep.Damaged != 0 {
			f.add("%s: Verify: Missing %d, Damaged %d; want Missing %d (the removed segment's records) and Damaged 0",
				who, rep.Missing, rep.Damaged, w.exp.missTo-w.exp.missFrom)
		}
	}

	// OffsetForTime.
	lowest := top
	for off := uint64(0); off < top; off++ {
		if w.protected(off) {
			lowest = off
			break
		}
	}
	for _, q := range []struct {
		t     time.Time
		limit uint64
	}{{tp.t0, lowest}, {tp.midT, tp.mid}, {time.Now().Add(time.Hour), next}, {time.Unix(0, 0), lowest}, {time.Unix(1<<40, 0), next}} {
		got, err := l.OffsetForTime(q.t)
		if err != nil {
			f.add("%s: OffsetForTime(%v): %v", who, q.t, err)
			continue
		}
		if w.exp.timesOK && got > q.limit && (q.limit != tp.mid || w.protected(tp.mid)) {
			f.add("%s: OffsetForTime(%v) = %d, later than %d (records at or after it were appended after that time)", who, q.t, got, q.limit)
		}
	}
	return rep
}

// hostileRanges prints offsets as ranges.
func hostileRanges(offs []uint64) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.FormatUint(offs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", offs[i], offs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// hostileWorkers is how many cases run at once.
func hostileWorkers() int { return max(2, min(4, runtime.NumCPU())) }

// ---------------------------------------------------------------------------
// TestHostileConcurrency.
//
// Every public method of a Log, from many goroutines at once, while Close
// comes at a random moment; a read-only Log beside a writable one that
// appends (rolling tiny segments), drops and truncates; and two races of a
// sync with DropBefore and Truncate, made deterministic with the datasync
// hook. Bodies are self-describing (writer, sequence number, attributes
// flag, and bytes derived from them), and every (writer, sequence number)
// is appended once: a served record must be whole, must carry the
// attributes it was appended with, and must be served at the offset its
// Append returned. Errors must come from the documented set: ErrClosed only
// once Close was called, ErrNotFound (ErrTrimmed) for offsets dropped, cut
// or out of range, ErrReadOnly for writes to a read-only log; never
// ErrCorrupt (nothing is damaged) or ErrSyncFailed (no disk fails).

// hostileSeed returns the seed of this run: HOSTILE_SEED, or the clock.
func hostileSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOSTILE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HOSTILE_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (repeat with HOSTILE_SEED=%d)", seed, seed)
	return seed
}

func hostileKey(w byte, seq uint64) uint64 { return uint64(w)<<56 | seq }

// hostileTagged is writer w's record seq: w, the attributes flag, seq, then
// bytes derived from all three.
func hostileTagged(w byte, seq uint64, attrs bool) []byte {
	n := 10 + int((seq*31+uint64(w)*7)%300)
	b := make([]byte, n)
	b[0] = w
	if attrs {
		b[1] = 1
	}
	binary.BigEndian.PutUint64(b[2:], seq)
	for i := 10; i < n; i++ {
		b[i] = byte(seq*13 + uint64(i)*uint64(w+1) + uint64(b[1])*5)
	}
	return b
}

func hostileAttrs(w byte, seq uint64) *Attrs {
	return &Attrs{Group: []byte(fmt.Sprintf("g%d.%d", w, seq%97)), HasDue: true, Due: int64(seq)}
}

// hostileReg knows at which offset each (writer, seq) was appended.
type hostileReg struct {
	at      sync.Map // key -> offset, once Append returned
	failed  sync.Map // key -> true: Append returned an error
	mu      sync.Mutex
	pending []hostileObs // seen by a reader before its Append returned
}

type hostileObs struct {
	key, off uint64
	who      string
}

func (g *hostileReg) appended(w byte, seq, off uint64) { g.at.Store(hostileKey(w, seq), off) }

// check checks a served record: whole, its attributes, its offset.
func (g *hostileReg) check(f *hostileFails, who string, off uint64, body []byte, attrs func() (Attrs, error)) {
	if len(body) < 10 {
		f.add("%s: record %d: a body of %d bytes that no Append wrote", who, off, len(body))
		return
	}
	w, seq, hasAttrs := body[0], binary.BigEndian.Uint64(body[2:]), body[1] == 1
	if !bytes.Equal(body, hostileTagged(w, seq, hasAttrs)) {
		f.add("%s: record %d: body is not writer %d's record %d (torn, stale or foreign bytes)", who, off, w, seq)
		return
	}
	a, err := attrs()
	switch {
	case err != nil:
		f.add("%s: record %d: Attrs: %v", who, off, err)
	case hasAttrs:
		want := hostileAttrs(w, seq)
		if !bytes.Equal(a.Group, want.Group) || !a.HasDue || a.Due != want.Due {
			f.add("%s: record %d: attributes %+v, want %+v", who, off, a, *want)
		}
	case !a.Empty():
		f.add("%s: record %d: attributes %+v on a record appended without", who, off, a)
	}
	key := hostileKey(w, seq)
	if v, ok := g.at.Load(key); ok {
		if v.(uint64) != off {
			f.add("%s: writer %d's record %d served at offset %d, its Append returned %d", who, w, seq, off, v)
		}
		return
	}
	g.mu.Lock()
	g.pending = append(g.pending, hostileObs{key, off, who})
	g.mu.Unlock()
}

// finish checks the records seen before their Append returned.
func (g *hostileReg) finish(f *hostileFails, unackedOK bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.pending {
		if v, ok := g.at.Load(o.key); ok {
			if v.(uint64) != o.off {
				f.add("%s: writer %d's record %d served at offset %d, its Append returned %d", o.who, o.key>>56, o.key&(1<<56-1), o.off, v)
			}
			continue
		}
		if _, failed := g.failed.Load(o.key); failed && unackedOK {
			continue
		}
		f.add("%s: writer %d's record %d served at offset %d, but its Append failed or never returned", o.who, o.key>>56, o.key&(1<<56-1), o.off)
	}
	g.pending = nil
}

// hostileErr checks that err is one of allowed, or ErrClosed once closing.
func hostileErr(f *hostileFails, who string, err error, closing *atomic.Bool, allowed ...error) {
	if err == nil {
		return
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return
		}
	}
	if errors.Is(err, ErrClosed) {
		if closing != nil && closing.Load() {
			return
		}
		f.add("%s: ErrClosed before Close was called: %v", who, err)
		return
	}
	f.add("%s: undocumented error here: %v", who, err)
}

// hostileHeld is a reader's records kept across other calls (and Close).
type hostileHeld struct {
	recs   []Record
	bodies [][]byte // copies, to compare with later
}

func (h *hostileHeld) keep(r Record) {
	h.recs = append(h.recs, r)
	h.bodies = append(h.bodies, bytes.Clone(r.Body))
}

// recheck: a held record's body must not change until it is released, even
// after its segment was dropped or the log closed.
func (h *hostileHeld) recheck(f *hostileFails, who string) {
	for i, r := range h.recs {
		if !bytes.Equal(r.Body, h.bodies[i]) {
			f.add("%s: held record %d changed before its Release", who, r.Offset)
		}
	}
}

func (h *hostileHeld) release(n int) {
	for len(h.recs) > n {
		r := h.recs[0]
		c := r
		r.Release()
		c.Release() // a copy: a no-op
		r.Release() // twice: a no-op
		h.recs, h.bodies = h.recs[1:], h.bodies[1:]
	}
}

// hostileWorld is one log under attack.
type hostileWorld struct {
	f       *hostileFails
	l       *Log
	reg     *hostileReg
	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
	ro      bool
}

func (x *hostileWorld) stopped() bool {
	select {
	case <-x.stop:
		return true
	default:
		return false
	}
}

// spawn runs fn(rng) in a loop until stop.
func (x *hostileWorld) spawn(who string, seed uint64, fn func(rng *rand.Rand)) {
	hostileGo(&x.wg, x.f, who, func() {
		rng := rand.New(rand.NewPCG(seed, uint64(len(who))))
		for !x.stopped() {
			fn(rng)
		}
	})
}

// readRandom reads one random offset around [First, Next).
func (x *hostileWorld) readRandom(who string, rng *rand.Rand, h *hostileHeld) {
	l := x.l
	first, next := l.First(), l.Next()
	off := first + rng.Uint64N(next-first+4)
	if off >= 2 {
		off -= 2
	}
	r, err := l.Read(off)
	if err != nil {
		hostileErr(x.f, who+": Read", err, &x.closing, ErrNotFound)
		return
	}
	if r.Offset != off {
		x.f.add("%s: Read(%d) returned offset %d", who, off, r.Offset)
	}
	x.reg.check(x.f, who+": Read", off, r.Body, r.Attrs)
	hostileReads.Add(1)
	switch rng.IntN(3) {
	case 0:
		c := r
		c.Release()
		r.Release()
	case 1:
		r.Release()
		r.Release()
	default:
		h.keep(r)
		h.recheck(x.f, who)
		h.release(6)
	}
}

// iterate runs Records and Inspect from a random offset, breaking early.
func (x *hostileWorld) iterate(who string, rng *rand.Rand) {
	l := x.l
	first, next := l.First(), l.Next()
	from := first + rng.Uint64N(next-first+2)
	if from > 0 && rng.IntN(4) == 0 {
		from -= min(from, uint64(rng.IntN(50)))
	}
	stopAt := rng.IntN(60)
	n, last := 0, int64(-1)
	for r, err := range l.Records(from) {
		if n++; n > stopAt {
			break
		}
		if err != nil {
			hostileErr(x.f, who+": Records", err, &x.closing, ErrNotFound)
			continue
		}
		if int64(r.Offset) <= last {
			x.f.add("%s: Records(%d) yielded %d after %d", who, from, r.Offset, last)
		}
		last = int64(r.Offset)
		x.reg.check(x.f, who+": Records", r.Offset, r.Body, r.Attrs)
		hostileIterated.Add(1)
	}
	n = 0
	for ri := range l.Inspect(from) {
		if n++; n > stopAt {
			break
		}
		if !ri.OK {
			if ri.Err == nil {
				x.f.add("%s: Inspect(%d): offset %d not OK without a reason", who, from, ri.Offset)
			} else {
				hostileErr(x.f, who+": Inspect", ri.Err, &x.closing, ErrNotFound)
			}
			continue
		}
		if ri.Size < headerSize+10 || ri.Position < 0 {
			x.f.add("%s: Inspect: offset %d OK with size %d at %d", who, ri.Offset, ri.Size, ri.Position)
		}
	}
}

// misc calls Verify, OffsetForTime, First, Next, Durable and Recovery.
func (x *hostileWorld) misc(who string, rng *rand.Rand) {
	l := x.l
	if rng.IntN(8) == 0 {
		rep, err := l.Verify(nil)
		hostileErr(x.f, who+": Verify", err, &x.closing)
		if err == nil && !rep.Healthy() {
			x.f.add("%s: Verify of an undamaged log: damaged %d, missing %d, problems %q, index problems %q",
				who, rep.Damaged, rep.Missing, hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
		}
	}
	t := time.Now().Add(time.Duration(rng.IntN(200)-150) * time.Millisecond)
	off, err := l.OffsetForTime(t)
	hostileErr(x.f, who+": OffsetForTime", err, &x.closing)
	if next := l.Next(); err == nil && off > next+uint64(1) && !x.closing.Load() {
		// Next may have moved down (Truncate) since: only flag wild answers.
		if off > next+1000 {
			x.f.add("%s: OffsetForTime = %d, far past Next %d", who, off, next)
		}
	}
	if f, n := l.First(), l.Next(); f > n && !x.closing.Load() {
		x.f.add("%s: First %d > Next %d", who, f, n)
	}
	_ = l.Durable()
	_ = l.Recovery()
}

func TestHostileConcurrency(t *testing.T) {
	seed := hostileSeed(t)
	root := hostileRoot(t)
	for round := range 6 {
		if hung.Load() {
			t.Errorf("writable round %d not run: an earlier round left a Close hung (spinning)", round)
			continue
		}
		fails := hostileRun(20*time.Second, func(f *hostileFails) {
			hostileWritableRound(f, filepath.Join(root, fmt.Sprintf("w%d", round)), seed, round)
		})
		for _, m := range fails {
			t.Errorf("writable round %d: %s", round, m)
		}
	}
	for round := range 3 {
		fails := hostileRun(20*time.Second, func(f *hostileFails) {
			hostileReadOnlyRound(f, filepath.Join(root, fmt.Sprintf("r%d", round)), seed, round)
		})
		for _, m := range fails {
			t.Errorf("read-only round %d: %s", round, m)
		}
	}
	t.Logf("rounds: %d appends, %d records read with Read, %d with Records", hostileAppends.Load(), hostileReads.Load(), hostileIterated.Load())
	if hostileReads.Load() == 0 || hostileIterated.Load() == 0 || hostileAppends.Load() == 0 {
		t.Errorf("the rounds read or appended nothing: they tested nothing")
	}
	t.Run("SyncRacingDropBefore", func(t *testing.T) { hostileSyncRacingDropBefore(t, hostileRoot(t)) })
	t.Run("SyncRacingTruncate", func(t *testing.T) { hostileSyncRacingTruncate(t, hostileRoot(t)) })
	t.Run("WaitDurableRacingTruncate", func(t *testing.T) { hostileWaitDurableRacingTruncate(t, hostileRoot(t)) })
}

// hung is set when a round left a Close that never returns: its
// goroutines spin for the rest of the process.
var hung atomic.Bool

// What the rounds did, to show they tested something.
var hostileReads, hostileIterated, hostileAppends atomic.Int64

func hostileWritableRound(f *hostileFails, dir string, seed uint64, round int) {
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	policy := []SyncPolicy{SyncNone, SyncInterval, SyncAlways}[round%3]
	opts := Options{
		SegmentBytes:       1024 + rng.Int64N(4096),
		IndexIntervalBytes: 32 + rng.IntN(512),
		Sync:               policy,
		SyncInterval:       time.Duration(1+rng.IntN(5)) * time.Millisecond,
	}
	l, err := Open(dir, opts)
	if err != nil {
		f.add("Open: %v", err)
		return
	}
	x := &hostileWorld{f: f, l: l, reg: &hostileReg{}, stop: make(chan struct{})}
	for seq := range uint64(40) {
		off, err := l.AppendWith(hostileTagged(0, seq, seq%2 == 0), map[bool]*Attrs{true: hostileAttrs(0, seq)}[seq%2 == 0])
		if err != nil {
			f.add("prefill: %v", err)
			return
		}
		x.reg.appended(0, seq, off)
	}
	for w := byte(1); w <= 2; w++ {
		seq := uint64(0)
		x.spawn(fmt.Sprintf("appender %d", w), seed+uint64(w), func(rng *rand.Rand) {
			seq++
			withAttrs := rng.IntN(3) == 0
			var attrs *Attrs
			if withAttrs {
				attrs = hostileAttrs(w, seq)
			}
			var off uint64
			var err error
			if withAttrs || rng.IntN(2) == 0 {
				off, err = l.AppendWith(hostileTagged(w, seq, withAttrs), attrs)
			} else {
				off, err = l.Append(hostileTagged(w, seq, false))
			}
			if err != nil {
				x.reg.failed.Store(hostileKey(w, seq), true)
				// Under SyncAlways a Truncate may cut the record before a
				// sync covered it: Append then says it is gone.
				hostileErr(f, fmt.Sprintf("appender %d: Append", w), err, &x.closing, ErrNotFound)
				time.Sleep(time.Millisecond)
				return
			}
			x.reg.appended(w, seq, off)
			hostileAppends.Add(1)
		})
	}
	for i := range 2 {
		who := fmt.Sprintf("reader %d", i)
		h := &hostileHeld{}
		hostileGo(&x.wg, f, who, func() {
			rng := rand.New(rand.NewPCG(seed, uint64(10+i)))
			for !x.stopped() {
				x.readRandom(who, rng, h)
			}
			// After Close: what is held is still the record it was.
			h.recheck(f, who+" (after Close)")
			h.release(0)
		})
	}
	x.spawn("iterator", seed+20, func(rng *rand.Rand) { x.iterate("iterator", rng) })
	x.spawn("misc", seed+21, func(rng *rand.Rand) { x.misc("misc", rng) })
	x.spawn("syncer", seed+22, func(rng *rand.Rand) {
		if rng.IntN(2) == 0 {
			hostileErr(f, "syncer: Sync", l.Sync(), &x.closing)
			return
		}
		first, next := l.First(), l.Next()
		off := first + rng.Uint64N(next-first+1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := l.WaitDurable(ctx, off)
		cancel()
		hostileErr(f, "syncer: WaitDurable", err, &x.closing, ErrNotFound, context.DeadlineExceeded)
	})
	x.spawn("trimmer", seed+23, func(rng *rand.Rand) {
		time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Microsecond)
		first, next := l.First(), l.Next()
		switch rng.IntN(4) {
		case 0:
			off := next - min(next-first, uint64(rng.IntN(4)))
			hostileErr(f, fmt.Sprintf("trimmer: Truncate(%d)", off), l.Truncate(off), &x.closing, ErrNotFound)
		default:
			if next-first > 60 {
				_, err := l.DropBefore(first + (next-first)/2)
				hostileErr(f, "trimmer: DropBefore", err, &x.closing)
			}
		}
	})
	closeErr := make(chan error, 1)
	stop := sync.OnceFunc(func() { close(x.stop) })
	var closed atomic.Bool
	hostileGo(&x.wg, f, "closer", func() {
		time.Sleep(time.Duration(10+rng.IntN(60)) * time.Millisecond)
		x.closing.Store(true)
		watch := time.AfterFunc(2*time.Second, func() {
			if !closed.Load() {
				f.add("Close has not returned after 2 s (%v policy); the goroutines in the engine:\n%s", policy, hostileEngineStacks())
				// Test-only cleanup: let the waiters that spin for an
				// offset no sync will reach go, so that Close can end
				// and the spinning stops.
				l.sync.durable.Store(math.MaxUint64)
				time.AfterFunc(2*time.Second, func() {
					if !closed.Load() {
						hung.Store(true)
					}
				})
			}
			stop()
		})
		err := l.Close()
		closed.Store(true)
		watch.Stop()
		closeErr <- err
		if err != nil {
			f.add("closer: Close: %v", err)
		}
		if err := l.Close(); !errors.Is(err, ErrClosed) {
			f.add("closer: second Close: %v, want ErrClosed", err)
		}
		time.Sleep(5 * time.Millisecond) // everybody meets the closed log
		stop()
	})
	x.wg.Wait()
	x.reg.finish(f, policy == SyncAlways)

	// What is on disk now: every record whole, at the offset its Append
	// returned; the clean close recognized.
	cerr := <-closeErr
	l2, err := Open(dir, Options{})
	if err != nil {
		f.add("reopen: %v", err)
		return
	}
	defer l2.Close()
	if cerr == nil && !l2.Recovery().Clean {
		f.add("reopen after a Close that returned nil: the clean-close marker was not trusted: %s (notes %q)",
			l2.Recovery().Active.CleanMismatch, l2.Recovery().Notes)
	}
	for off := l2.First(); off < l2.Next(); off++ {
		r, err := l2.Read(off)
		if err != nil {
			f.add("reopen: Read(%d): %v", off, err)
			continue
		}
		x.reg.check(f, "reopen", off, r.Body, r.Attrs)
		r.Release()
	}
	x.reg.finish(f, policy == SyncAlways)
	if rep, err := l2.Verify(nil); err != nil || !rep.Healthy() {
		f.add("reopen: Verify: %v, damaged %d missing %d problems %q index problems %q", err, rep.Damaged, rep.Missing,
			hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
	}
}

func hostileReadOnlyRound(f *hostileFails, dir string, seed uint64, round int) {
	rng := rand.New(rand.NewPCG(seed, uint64(100+round)))
	w, err := Open(dir, Options{SegmentBytes: 512 + rng.Int64N(1024), IndexIntervalBytes: 64})
	if err != nil {
		f.add("Open: %v", err)
		return
	}
	reg := &hostileReg{}
	seq := uint64(0)
	for ; seq < 200; seq++ {
		off, err := w.Append(hostileTagged(1, seq, false))
		if err != nil {
			f.add("prefill: %v", err)
			return
		}
		reg.appended(1, seq, off)
	}
	r, err := OpenReadOnly(dir, Options{})
	if err != nil {
		f.add("OpenReadOnly: %v", err)
		return
	}
	x := &hostileWorld{f: f, l: r, reg: reg, stop: make(chan struct{}), ro: true}
	var wstop atomic.Bool
	var writers sync.WaitGroup
	hostileGo(&writers, f, "writer", func() {
		rng := rand.New(rand.NewPCG(seed, 200))
		for !wstop.Load() {
			seq++
			withAttrs := rng.IntN(3) == 0
			var attrs *Attrs
			if withAttrs {
				attrs = hostileAttrs(1, seq)
			}
			off, err := w.AppendWith(hostileTagged(1, seq, withAttrs), attrs)
			if err != nil {
				f.add("writer: Append: %v", err)
				return
			}
			reg.appended(1, seq, off)
			switch {
			case seq%97 == 0:
				first, next := w.First(), w.Next()
				if next-first > 200 {
					if _, err := w.DropBefore(next - 150); err != nil {
						f.add("writer: DropBefore: %v", err)
					}
				}
			case seq%331 == 0:
				if err := w.Truncate(w.Next() - 2); err != nil {
					f.add("writer: Truncate: %v", err)
				}
			}
		}
	})
	for i := range 2 {
		who := fmt.Sprintf("read-only reader %d", i)
		h := &hostileHeld{}
		hostileGo(&x.wg, f, who, func() {
			rng := rand.New(rand.NewPCG(seed, uint64(110+i)))
			for !x.stopped() {
				x.readRandom(who, rng, h)
			}
			h.recheck(f, who+" (after Close)")
			h.release(0)
		})
	}
	x.spawn("read-only iterator", seed+120, func(rng *rand.Rand) { x.iterate("read-only iterator", rng) })
	x.spawn("read-only misc", seed+121, func(rng *rand.Rand) { x.misc("read-only misc", rng) })
	x.spawn("read-only writes", seed+122, func(rng *rand.Rand) {
		who := "read-only writes"
		_, err := r.Append([]byte("x"))
		hostileErr(f, who+": Append", hostileMust(err, ErrReadOnly), &x.closing, ErrReadOnly)
		_, err = r.AppendWith([]byte("x"), hostileAttrs(9, 1))
		hostileErr(f, who+": AppendWith", hostileMust(err, ErrReadOnly), &x.closing, ErrReadOnly)
		hostileErr(f, who+": Sync", hostileMust(r.Sync(), ErrReadOnly), &x.closing, ErrReadOnly)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		hostileErr(f, who+": WaitDurable", hostileMust(r.WaitDurable(ctx, r.First()), ErrReadOnly), &x.closing, ErrReadOnly)
		cancel()
		_, err = r.DropBefore(r.Next())
		hostileErr(f, who+": DropBefore", hostileMust(err, ErrReadOnly), &x.closing, ErrReadOnly)
		hostileErr(f, who+": Truncate", hostileMust(r.Truncate(r.First()), ErrReadOnly), &x.closing, ErrReadOnly)
		time.Sleep(200 * time.Microsecond)
	})
	x.spawn("opener", seed+123, func(rng *rand.Rand) {
		// Read-only opens beside the writer, over and over.
		o, err := OpenReadOnly(dir, Options{})
		if err != nil {
			f.add("opener: OpenReadOnly beside a writer: %v", err)
			return
		}
		y := &hostileWorld{f: f, l: o, reg: reg}
		for range 10 {
			y.readRandom("opener", rng, &hostileHeld{})
		}
		y.iterate("opener", rng)
		if rep, err := o.Verify(nil); err != nil || !rep.Healthy() {
			f.add("opener: Verify of a read-only open beside a writer: %v, damaged %d missing %d problems %q index problems %q",
				err, rep.Damaged, rep.Missing, hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
		}
		if err := o.Close(); err != nil {
			f.add("opener: Close: %v", err)
		}
	})
	hostileGo(&x.wg, f, "closer", func() {
		time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		x.closing.Store(true)
		if err := r.Close(); err != nil {
			f.add("closer: Close of the read-only log: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		close(x.stop)
	})
	x.wg.Wait()
	wstop.Store(true)
	writers.Wait()
	reg.finish(f, false)
	if err := w.Close(); err != nil {
		f.add("writer: Close: %v", err)
	}
	// At rest, the log the writer left is whole.
	o, err := OpenReadOnly(dir, Options{})
	if err != nil {
		f.add("at rest: OpenReadOnly: %v", err)
		return
	}
	defer o.Close()
	for off := o.First(); off < o.Next(); off++ {
		r, err := o.Read(off)
		if err != nil {
			f.add("at rest: Read(%d): %v", off, err)
			continue
		}
		reg.check(f, "at rest", off, r.Body, r.Attrs)
		r.Release()
	}
	if rep, err := o.Verify(nil); err != nil || !rep.Healthy() {
		f.add("at rest: Verify: %v, damaged %d missing %d problems %q index problems %q", err, rep.Damaged, rep.Missing,
			hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
	}
}

// hostileMust turns a nil error where want was due into one that
// hostileErr reports.
func hostileMust(err, want error) error {
	if err == nil {
		return fmt.Errorf("nil, want %v", want)
	}
	return err
}

// hostileSyncHook is a datasync that can hold the first call it sees once
// armed, and records which files (by inode) it synced and when.
type hostileSyncHook struct {
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	synced  []hostileSynced
}

type hostileSynced struct {
	name string
	ino  uint64
	seq  int
}

func newHostileSyncHook() *hostileSyncHook {
	return &hostileSyncHook{entered: make(chan struct{}, 1), gate: make(chan struct{})}
}

func (h *hostileSyncHook) datasync(f *os.File) error {
	if h.armed.CompareAndSwap(true, false) {
		h.entered <- struct{}{}
		<-h.gate
	}
	err := mmapfile.Datasync(f)
	if err == nil {
		h.mu.Lock()
		h.synced = append(h.synced, hostileSynced{filepath.Base(f.Name()), hostileIno(f.Name(), f), len(h.synced)})
		h.mu.Unlock()
	}
	return err
}

func hostileIno(name string, f *os.File) uint64 {
	if f != nil {
		if st, err := f.Stat(); err == nil {
			return hostileFileIno(st)
		}
	}
	if st, err := os.Stat(name); err == nil {
		return hostileFileIno(st)
	}
	return 0
}

// hostileSyncRacingDropBefore: a Sync that began before DropBefore removed
// segments it still had to sync. Nothing failed on the disk, so the log
// must not end up refusing appends with ErrSyncFailed.
func hostileSyncRacingDropBefore(t *testing.T, dir string) {
	h := newHostileSyncHook()
	opts := Options{SegmentBytes: 1024}
	opts.datasync = h.datasync
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq := range uint64(40) {
		if _, err := l.Append(hostileTagged(1, seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(logFiles(t, dir)); n < 4 {
		t.Fatalf("only %d segments", n)
	}
	h.armed.Store(true)
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }()
	<-h.entered // the sync is under way: it holds the list of sealed segments to sync
	n, derr := l.DropBefore(l.Next() - 1)
	close(h.gate)
	serr := <-syncErr
	_, aerr := l.Append(hostileTagged(1, 100, false))
	s2 := l.Sync()
	if derr != nil || serr != nil || aerr != nil || s2 != nil {
		t.Errorf("Sync racing DropBefore (%d segments dropped): DropBefore %v; the Sync: %v; the next Append: %v; the next Sync: %v "+
			"(nothing failed on the disk: the sync tried to sync segments DropBefore had removed)", n, derr, serr, aerr, s2)
	}
}

// hostileSyncRacingTruncate: a Sync that began before Truncate cut the
// records it was covering and finished after new records were appended at
// the same offsets. Durable (and WaitDurable) must not claim the new
// records, which no fdatasync covered.
func hostileSyncRacingTruncate(t *testing.T, dir string) {
	h := newHostileSyncHook()
	opts := Options{SegmentBytes: 1 << 20}
	opts.datasync = h.datasync
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq := range uint64(10) {
		if _, err := l.Append(hostileTagged(1, seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	h.armed.Store(true)
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }() // covers offsets 0-9 of the file as it is now
	<-h.entered
	if err := l.Truncate(5); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(50); seq < 55; seq++ { // offsets 5-9 again, other records
		if _, err := l.Append(hostileTagged(2, seq, false)); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	before := len(h.synced)
	h.mu.Unlock()
	close(h.gate)
	if err := <-syncErr; err != nil {
		t.Fatalf("Sync: %v", err)
	}
	logName := segment.Name(0, segment.LogSuffix)
	ino := hostileIno(filepath.Join(dir, logName), nil)
	h.mu.Lock()
	covered := false
	for _, s := range h.synced[before:] {
		if s.name == logName && s.ino == ino {
			covered = true
		}
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d := l.Durable(); d > 5 && !covered {
		t.Errorf("Durable is %d, but records 5-9 were appended after a Truncate(5) and no fdatasync of the current %s "+
			"followed them (the sync that finished had started before the Truncate, on the old file)", d, logName)
		h.mu.Lock()
		n := len(h.synced)
		h.mu.Unlock()
		if err := l.WaitDurable(ctx, 9); err == nil {
			h.mu.Lock()
			if len(h.synced) == n {
				t.Errorf("WaitDurable(9) returned nil at once, with no fdatasync: record 9 is not durable")
			}
			h.mu.Unlock()
		}
	}
}

func hostileFileIno(st os.FileInfo) uint64 { return inodeNumber(st) }

// ---------------------------------------------------------------------------
// TestHostileSettings.
//
// Every extreme setting is either refused at Open with an error matching
// ErrBadOptions whose message names the setting and its allowed range (and
// nothing is created), or works: appends and reads round-trip, offsets
// never repeat or wrap, Verify ends and is healthy, and so after a reopen
// with zero Options and a read-only open. Changing IndexIntervalBytes (or
// SegmentBytes) on reopen, after a clean or an unclean stop, leaves Verify
// healthy.

func TestHostileSettings(t *testing.T) {
	root := t.TempDir() // on disk: some settings preallocate gigabytes
	type sc struct {
		name   string
		opts   Options
		refuse string // the setting's name, when Open must refuse it
	}
	withSync := func(d time.Duration) Options { return Options{Sync: SyncInterval, SyncInterval: d} }
	cases := []sc{
		{"SegmentBytes=1", Options{SegmentBytes: 1}, ""},
		{"SegmentBytes=16", Options{SegmentBytes: 16}, ""},
		{"SegmentBytes=17", Options{SegmentBytes: 17}, ""},
		{"SegmentBytes=MaxSegmentBytes", Options{SegmentBytes: maxSegmentBytesHere}, ""},
		{"SegmentBytes=MaxSegmentBytes+1", Options{SegmentBytes: maxSegmentBytesHere + 1}, "SegmentBytes"},
		{"SegmentBytes=-1", Options{SegmentBytes: -1}, "SegmentBytes"},
		{"SegmentBytes=MinInt64", Options{SegmentBytes: math.MinInt64}, "SegmentBytes"},
		{"IndexIntervalBytes=0", Options{IndexIntervalBytes: 0}, ""},
		// With the default 64 MiB segments an interval of 1 byte preallocates
		// 80 MiB of index files, which Verify reads whole: 3 s under -race.
		{"IndexIntervalBytes=1", Options{IndexIntervalBytes: 1, SegmentBytes: 1 << 20}, ""},
		{"IndexIntervalBytes=1<<32-1", Options{IndexIntervalBytes: maxIntervalHere}, ""},
		{"IndexIntervalBytes=1<<32", Options{IndexIntervalBytes: intervalOverLimit()}, "IndexIntervalBytes"},
		{"IndexIntervalBytes=-1", Options{IndexIntervalBytes: -1}, "IndexIntervalBytes"},
		{"MaxRecordBytes=1", Options{MaxRecordBytes: 1}, ""},
		{"MaxRecordBytes=max", Options{MaxRecordBytes: maxBodyLimit}, ""},
		{"MaxRecordBytes=max+1", Options{MaxRecordBytes: maxBodyLimit + 1}, "MaxRecordBytes"},
		{"MaxRecordBytes=-1", Options{MaxRecordBytes: -1}, "MaxRecordBytes"},
		{"FirstOffset=0", Options{FirstOffset: 0}, ""},
		{"FirstOffset=1<<63", Options{FirstOffset: 1 << 63}, ""},
		{"FirstOffset=MaxUint64-2", Options{FirstOffset: math.MaxUint64 - 2}, ""},
		{"FirstOffset=MaxUint64-1", Options{FirstOffset: math.MaxUint64 - 1}, ""},
		{"FirstOffset=MaxUint64", Options{FirstOffset: math.MaxUint64}, "FirstOffset"},
		{"FirstOffset=MaxUint64-2,SegmentBytes=1", Options{FirstOffset: math.MaxUint64 - 2, SegmentBytes: 1}, ""},
		{"SyncInterval=-1ns", withSync(-1), "SyncInterval"},
		{"SyncInterval=1ns", withSync(1), ""},
		{"Sync=7", Options{Sync: 7}, "sync policy"},
		{"Sync=-1", Options{Sync: -1}, "sync policy"},
		{"FileMode=setuid|0600", Options{FileMode: os.ModeSetuid | 0o600}, "FileMode"},
		{"FileMode=ModeDir|0600", Options{FileMode: os.ModeDir | 0o600}, "FileMode"},
		{"FileMode=ModeSticky", Options{FileMode: os.ModeSticky}, "FileMode"},
		{"DirMode=ModeSetgid|0700", Options{DirMode: os.ModeSetgid | 0o700}, "DirMode"},
	}
	rangeRE := regexp.MustCompile(`\[[^\]]*,[^\]]*\]`)
	for i, c := range cases {
		dir := filepath.Join(root, fmt.Sprintf("%02d", i), "log") // not created yet
		cs := time.Now()
		fails := hostileRun(60*time.Second, func(f *hostileFails) {
			if c.refuse != "" {
				hostileRefused(f, dir, c.opts, c.refuse, rangeRE)
				return
			}
			hostileWorks(f, dir, c.opts)
		})
		if os.Getenv("HOSTILE_TIMING") != "" {
			t.Logf("TIMING %v %s", time.Since(cs).Round(time.Millisecond), c.name)
		}
		for _, m := range fails {
			t.Errorf("%s: %s", c.name, m)
		}
	}
	scratch := hostileRoot(t)
	for _, unclean := range []bool{false, true} {
		name := "clean"
		if unclean {
			name = "unclean"
		}
		fails := hostileRun(60*time.Second, func(f *hostileFails) {
			cs := time.Now()
			hostileChangeSettings(f, filepath.Join(scratch, "change-"+name), unclean)
			if os.Getenv("HOSTILE_TIMING") != "" {
				t.Logf("TIMING %v change %s", time.Since(cs).Round(time.Millisecond), name)
			}
		})
		for _, m := range fails {
			t.Errorf("settings changed on reopen after a %s stop: %s", name, m)
		}
	}
}

func hostileRefused(f *hostileFails, dir string, opts Options, name string, rangeRE *regexp.Regexp) {
	l, err := Open(dir, opts)
	if err == nil {
		f.add("Open accepted it (Next %d)", l.Next())
		_ = l.Close()
		return
	}
	if !errors.Is(err, ErrBadOptions) {
		f.add("Open: %v, want an error matching ErrBadOptions", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, name) {
		f.add("Open: the message %q does not name %s", msg, name)
	}
	isMode := strings.HasSuffix(name, "Mode")
	if !rangeRE.MatchString(msg) && !(isMode && strings.Contains(msg, "permission")) && !strings.Contains(msg, "want ") {
		f.add("Open: the message %q does not give the allowed range", msg)
	}
	if _, err := os.Stat(filepath.Dir(dir)); err == nil {
		f.add("Open refused the options but created %s", filepath.Dir(dir))
	}
	// The other entry points refuse them too.
	if l, err := OpenReadOnly(dir, opts); !errors.Is(err, ErrBadOptions) {
		f.add("OpenReadOnly: %v, want ErrBadOptions", err)
		if err == nil {
			_ = l.Close()
		}
	}
	if _, err := Recover(dir, opts, RecoverOptions{}); !errors.Is(err, ErrBadOptions) {
		f.add("Recover: %v, want ErrBadOptions", err)
	}
}

// hostileWorks appends, reads, verifies, reopens and reads again.
func hostileWorks(f *hostileFails, dir string, opts Options) {
	l, err := Open(dir, opts)
	if err != nil {
		f.add("Open: %v (want it to work, or an error matching ErrBadOptions)", err)
		return
	}
	maxBody := l.MaxRecordBytes()
	if opts.MaxRecordBytes > 0 && maxBody != opts.MaxRecordBytes {
		f.add("MaxRecordBytes() = %d, want %d", maxBody, opts.MaxRecordBytes)
	}
	first := l.Next()
	if first != opts.FirstOffset {
		f.add("a new log starts at %d, want FirstOffset %d", first, opts.FirstOffset)
	}
	bodies := map[uint64][]byte{}
	var offs []uint64
	full := false
	appendSome := func(l *Log, n int) {
		for i := range n {
			size := []int{0, 1, 2, 17, 100, 1000, 5000}[i%7]
			size = min(size, maxBody)
			want := l.Next()
			body := testBody(want, size)
			off, err := l.Append(body)
			if errors.Is(err, ErrFull) {
				full = true
				if l.Next() != want {
					f.add("Append: ErrFull moved Next from %d to %d", want, l.Next())
				}
				if want < math.MaxUint64-1 {
					f.add("Append: ErrFull at Next %d, far from the end of the offsets", want)
				}
				return
			}
			if err != nil {
				f.add("Append(%d bytes) at Next %d: %v", len(body), want, err)
				return
			}
			if off != want || (len(offs) > 0 && off <= offs[len(offs)-1]) {
				f.add("Append returned offset %d, want %d (after %v)", off, want, offs[max(0, len(offs)-3):])
				return
			}
			if _, dup := bodies[off]; dup {
				f.add("offset %d handed out twice", off)
			}
			bodies[off], offs = body, append(offs, off)
		}
	}
	check := func(who string, l *Log) {
		for _, off := range offs {
			r, err := l.Read(off)
			if err != nil {
				f.add("%s: Read(%d): %v", who, off, err)
				continue
			}
			if !bytes.Equal(r.Body, bodies[off]) {
				f.add("%s: Read(%d): not the record appended", who, off)
			}
			r.Release()
		}
		i, n := 0, 0
		for r, err := range l.Records(first) {
			if n++; n > len(offs)+10 {
				f.add("%s: Records yields more than the %d records appended", who, len(offs))
				break
			}
			if err != nil {
				f.add("%s: Records: %v", who, err)
				continue
			}
			if i >= len(offs) || r.Offset != offs[i] || !bytes.Equal(r.Body, bodies[r.Offset]) {
				f.add("%s: Records yielded offset %d, want %v", who, r.Offset, offs[min(i, len(offs)-1)])
				break
			}
			i++
		}
		if i != len(offs) {
			f.add("%s: Records yielded %d of %d records", who, i, len(offs))
		}
		n = 0
		for range l.Inspect(first) {
			if n++; n > len(offs)+10 {
				f.add("%s: Inspect yields more than the %d records appended", who, len(offs))
				break
			}
		}
		rep, err := l.Verify(nil)
		if err != nil || !rep.Healthy() || rep.Records != uint64(len(offs)) {
			f.add("%s: Verify: %v, %d records verified of %d, damaged %d missing %d problems %q index problems %q",
				who, err, rep.Records, len(offs), rep.Damaged, rep.Missing, hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
		}
	}
	appendSome(l, 12)
	if maxBody < 1<<20 {
		if _, err := l.Append(make([]byte, maxBody+1)); !errors.Is(err, ErrTooLarge) && !full {
			f.add("Append of MaxRecordBytes+1 bytes: %v, want ErrTooLarge", err)
		}
	}
	check("first open", l)
	if err := l.Close(); err != nil {
		f.add("Close: %v", err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		f.add("reopen with zero Options: %v", err)
		return
	}
	if want := first + uint64(len(offs)); l.Next() != want {
		f.add("reopen: Next %d, want %d", l.Next(), want)
	}
	check("reopen", l)
	appendSome(l, 5)
	check("reopen, appended", l)
	if err := l.Close(); err != nil {
		f.add("Close after reopen: %v", err)
	}
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		f.add("OpenReadOnly: %v", err)
		return
	}
	check("read-only", ro)
	_ = ro.Close()
}

// hostileChangeSettings writes a log, stops (cleanly or by copying the
// directory while it is open) and reopens it with other IndexIntervalBytes
// and SegmentBytes, appending each time; Verify must stay healthy.
func hostileChangeSettings(f *hostileFails, dir string, unclean bool) {
	l, err := Open(dir, Options{SegmentBytes: 8192, IndexIntervalBytes: 256})
	if err != nil {
		f.add("Open: %v", err)
		return
	}
	var sizes []int
	add := func(l *Log, n int) {
		for range n {
			off := l.Next()
			body := testBody(off, mixedSize(off))
			if got, err := l.Append(body); err != nil || got != off {
				f.add("Append: %d, %v; want %d", got, err, off)
				return
			}
			sizes = append(sizes, len(body))
		}
	}
	add(l, 150)
	for _, o := range []Options{
		{IndexIntervalBytes: 4096},
		{IndexIntervalBytes: 1},
		{IndexIntervalBytes: maxIntervalHere},
		{IndexIntervalBytes: 300, SegmentBytes: 1},
		{SegmentBytes: 64 << 10},
		{},
	} {
		if unclean {
			copied := dir + "-copy"
			_ = os.RemoveAll(copied)
			// The writer is open: kill -9 at a moment its background
			// work (a preparer, a roll naming its index files) leaves
			// the files as they stand.
			var cerr error
			if !whenQuiet(l, func() { cerr = hostileCopyDir(dir, copied) }) {
				f.add("copy: the log's background work never went quiet")
				return
			}
			if cerr != nil {
				f.add("copy: %v", cerr)
				return
			}
			_ = l.Close()
			_ = os.RemoveAll(dir)
			if err := os.Rename(copied, dir); err != nil {
				f.add("rename: %v", err)
				return
			}
		} else if err := l.Close(); err != nil {
			f.add("Close: %v", err)
		}
		who := fmt.Sprintf("reopened with %+v", hostileOpts(o))
		if l, err = Open(dir, o); err != nil {
			f.add("%s: Open: %v", who, err)
			return
		}
		check := func(what string, l *Log) {
			for off, n := range sizes {
				r, err := l.Read(uint64(off))
				if err != nil || !bytes.Equal(r.Body, testBody(uint64(off), n)) {
					f.add("%s: %s: Read(%d): %v", who, what, off, err)
					return
				}
				r.Release()
			}
			if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
				f.add("%s: %s: Verify: %v, damaged %d missing %d problems %q index problems %q", who, what, err,
					rep.Damaged, rep.Missing, hostileShort(rep.Problems), hostileShort(rep.IndexProblems))
			}
		}
		check("before appending", l)
		add(l, 40)
		check("after appending", l)
		if ro, err := OpenReadOnly(dir, Options{}); err != nil {
			f.add("%s: OpenReadOnly: %v", who, err)
		} else {
			check("read-only beside it", ro)
			_ = ro.Close()
		}
	}
	_ = l.Close()
}

// hostileOpts prints the non-zero settings of o.
func hostileOpts(o Options) string {
	var p []string
	if o.SegmentBytes != 0 {
		p = append(p, fmt.Sprintf("SegmentBytes:%d", o.SegmentBytes))
	}
	if o.IndexIntervalBytes != 0 {
		p = append(p, fmt.Sprintf("IndexIntervalBytes:%d", o.IndexIntervalBytes))
	}
	return "{" + strings.Join(p, " ") + "}"
}

// hostileEngineStacks returns the stacks of the goroutines that are inside
// the engine (for a hang).
func hostileEngineStacks() string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pagelog/engine.(*") || strings.Contains(g, "pagelog/internal/segment.") {
			lines := strings.Split(g, "\n")
			out = append(out, "        "+strings.Join(lines[:min(len(lines), 24)], "\n        "))
		}
	}
	if len(out) > 8 {
		out = append(out[:8], fmt.Sprintf("        ... %d more goroutines", len(out)-8))
	}
	return strings.Join(out, "\n")
}

// hostileWaitDurableRacingTruncate: a WaitDurable waiting behind a sync
// while Truncate cuts below its offset. It must return (ErrNotFound, or
// nil), not spin forever syncing a log that will never reach the offset.
func hostileWaitDurableRacingTruncate(t *testing.T, dir string) {
	h := newHostileSyncHook()
	opts := Options{SegmentBytes: 1 << 20}
	opts.datasync = h.datasync
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	add := func(n int) {
		for range n {
			if _, err := l.Append(hostileTagged(1, l.Next(), false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(8)
	h.armed.Store(true)
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }() // a sync covering offsets 0-7, held in fdatasync
	<-h.entered
	add(2)
	waitErr := make(chan error, 1)
	go func() { waitErr <- l.WaitDurable(context.Background(), 9) }()
	time.Sleep(50 * time.Millisecond) // let it wait behind the sync
	if err := l.Truncate(5); err != nil {
		t.Fatal(err)
	}
	close(h.gate)
	if err := <-syncErr; err != nil {
		t.Errorf("Sync: %v", err)
	}
	select {
	case err := <-waitErr:
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("WaitDurable(9) after Truncate(5): %v", err)
		}
		_ = l.Close()
	case <-time.After(time.Second):
		h.mu.Lock()
		n := len(h.synced)
		h.mu.Unlock()
		t.Errorf("WaitDurable(context.Background(), 9), waiting when Truncate(5) cut the log, has not returned after 1 s "+
			"(%d fdatasyncs run meanwhile: it spins, syncing); the engine's goroutines:\n%s", n, hostileEngineStacks())
		_ = l.Close() // the closed log makes it return
		select {
		case err := <-waitErr:
			t.Logf("after Close, WaitDurable returned %v", err)
		case <-time.After(2 * time.Second):
			t.Errorf("WaitDurable still has not returned after Close")
		}
	}
}
