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
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
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
				f.add("%s: panic: %v\n%s", who, r, debug.Stack())
			}
		}()
		fn()
	}()
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
		f.add("timed out after %v: a hang or an endless loop", timeout)
	}
	return f.list()
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
	return crc32.Update(crc32.Checksum(id[:], castagnoli), castagnoli, body)
}

// ---------------------------------------------------------------------------
// TestHostileFiles.
//
// The template: 8 KiB segments, IndexIntervalBytes 256, MaxRecordBytes 8000
// (so that the active file is preallocated to 8 KiB, not 1 MiB), a few
// hundred records of mixedSize bodies (testBody), at least 7 segments and
// at least 12 records in the newest. The log is synced, and log.recovery
// written, 5 records before the end: the 5 newest records lie past the
// recovery point (the "tail zone"). Two variants: "clean" (closed: log.clean
// is there) and "unclean" (copied while the writer was still open: no
// log.clean, the active files preallocated, as kill -9 leaves them).
//
// Expectations, per damaged file (N = records appended; "touched" = the
// records whose bytes the damage changed, or all of a segment's records
// for remove, empty and rename; RO/Open/Recover = what Verify says after
// OpenReadOnly, after Open, and Recover's After report):
//
//	file / damage                               untouched records   RO        Open      Recover
//	sealed .log: flip, empty, remove, halve,     all served         unhealthy unhealthy unhealthy
//	  garbage appended
//	sealed .log removed or emptied (not first)   its offsets ErrCorrupt, reported once as a missing
//	                                             range by Records, Inspect (Missing>0), Verify (Missing)
//	first .log removed                           all served         unhealthy any (*)   any (*)
//	.log renamed to base+7                       all served         unhealthy unhealthy healthy, nothing lost
//	  (newest: writable Open refuses with ErrMisnamed)
//	newest .log, damage below the recovery point all served, Next   unhealthy unhealthy unhealthy
//	                                             never lowered
//	newest .log, damage at or past the recovery  records before it  any       any       any
//	  point (a torn tail by the documented rule)   served; the cut must show in Recovery or Verify
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
// ErrCorrupt, outside it ErrNotFound; a read-only open changes no file;
// OffsetForTime never answers late (unless the time index was damaged);
// Verify counts as many good records as Inspect shows; a writable open
// never lowers Next below an offset that was appended, except by cutting a
// torn tail past the recovery point, and the next append gets Next.

const (
	hostileSegBytes = 8192
	hostileInterval = 256
	hostileMaxRec   = 8000
	hostileTail     = 5 // records appended after the recovery point
)

type hostileTpl struct {
	name  string
	dir   string
	n     uint64
	sizes []int       // body lengths
	segs  []segLayout // whole record sizes, by the roll rule
	rp    recoveryPoint
	t0    time.Time // before the first append
	midT  time.Time // before the append of midOff
	mid   uint64
	clean bool
}

func (tp *hostileTpl) body(off uint64) []byte { return testBody(off, tp.sizes[off]) }

// hostileTemplates builds the clean and the unclean template under root.
func hostileTemplates(t *testing.T, root string) []*hostileTpl {
	t.Helper()
	var whole []int
	n := 0
	for {
		whole = append(whole, headerSize+mixedSize(uint64(n)))
		n++
		if n >= 180 {
			segs := layout(0, whole, hostileSegBytes)
			if len(segs) >= 7 && len(segs[len(segs)-1].sizes) >= 12 {
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
	if err := hostileCopyDir(dir, unclean.dir); err != nil { // the writer is still open
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
	newestLog, err := os.ReadFile(filepath.Join(tp.dir, segment.Name(newest.base, segment.LogSuffix)))
	if err != nil {
		t.Fatal(err)
	}
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
	root := t.TempDir()
	tpls := hostileTemplates(t, root)
	total, failed := 0, 0
	for _, tp := range tpls {
		for ci, c := range hostileCases(t, tp) {
			total++
			caseDir := filepath.Join(root, fmt.Sprintf("%s-%03d", tp.name, ci))
			cs := time.Now()
			fails := hostileRun(60*time.Second, func(f *hostileFails) { hostileFileCase(f, tp, c, caseDir) })
			if os.Getenv("HOSTILE_TIMING") != "" {
				t.Logf("TIMING %v %s/%s", time.Since(cs).Round(time.Millisecond), tp.name, c.name)
			}
			_ = os.RemoveAll(caseDir)
			if len(fails) > 0 {
				failed++
				exp := fmt.Sprintf("want: RO %v, Open %v, Recover %v", c.exp.ro, c.exp.open, c.exp.rec)
				if c.exp.note != "" {
					exp += "; " + c.exp.note
				}
				t.Errorf("%s/%s (%s):\n    %s", tp.name, c.name, exp, strings.Join(fails, "\n    "))
			}
		}
	}
	t.Logf("%d cases, %d failed, in %v", total, failed, time.Since(start).Round(time.Millisecond))
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
	func() {
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
	}()

	// Open for writing.
	func() {
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
		hostileCheck(f, "writable, then read-only", ro, want2)
		_ = ro.Close()
	}()

	// Recover.
	func() {
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
	}()
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

var _ = []any{context.Background, io.EOF, regexp.MustCompile, atomic.Bool{}}
