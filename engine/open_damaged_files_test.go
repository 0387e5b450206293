package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// ---------------------------------------------------------------------------
// TestOpenDamagedFiles.
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
	damagedSegBytes = 8192
	damagedInterval = 256
	damagedMaxRec   = 8000
	damagedTail     = 5 // records appended after the recovery point
)

type damagedTemplate struct {
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

func (tp *damagedTemplate) body(off uint64) []byte { return tp.bodies[off] }

// damagedTemplates builds the clean and the unclean template under root.
func damagedTemplates(t *testing.T, root string) []*damagedTemplate {
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
			segs := layout(0, whole, damagedSegBytes)
			newest := segs[len(segs)-1]
			if k := n - damagedTail - int(newest.base); len(segs) >= 6 && k >= 7 && newest.positions()[k] > damagedSegBytes/2+200 {
				break
			}
		}
		if n > 5000 {
			t.Fatal("no template layout found")
		}
	}
	dir := filepath.Join(root, "clean")
	l, err := Open(dir, Options{SegmentBytes: damagedSegBytes, IndexIntervalBytes: damagedInterval, MaxRecordBytes: damagedMaxRec})
	if err != nil {
		t.Fatal(err)
	}
	clean := &damagedTemplate{name: "clean", dir: dir, n: uint64(n), mid: uint64(n / 2), clean: true}
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
		if off+1 == uint64(n-damagedTail) {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			// What the checkpointer writes after a sync (SyncInterval and
			// SyncAlways logs): the recovery point.
			clean.rp = l.sync.recoveryPoint()
			writeRecoveryFile(t, dir, clean.rp)
		}
	}
	unclean := *clean
	unclean.name, unclean.dir, unclean.clean = "unclean", filepath.Join(root, "unclean"), false
	// The writer is still open: the copy is taken while its background
	// work (a preparer, a roll naming its index files) leaves the files
	// as they stand, as a kill -9 then would.
	if !whenQuiet(l, func() { err = testkit.CopyDir(dir, unclean.dir, false) }) {
		t.Fatal("the log's background work never went quiet")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	clean.segs = checkLayout(t, dir, 0, whole, damagedSegBytes)
	unclean.segs = clean.segs
	newest := clean.segs[len(clean.segs)-1]
	if clean.rp.Base != newest.base || clean.rp.Next != uint64(n-damagedTail) || clean.rp.Pos <= 0 {
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
	return []*damagedTemplate{clean, &unclean}
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

func (h health) check(f *caseFailures, who string, rep VerifyReport) {
	bad := func() {
		f.add("%s: Verify: want %v; got Healthy=%v damaged %d missing %d problems %q index problems %q",
			who, h, rep.Healthy(), rep.Damaged, rep.Missing, firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
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

// damagedExpect is what one damaged directory must give.
type damagedExpect struct {
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

type damagedCase struct {
	name   string
	damage func(dir string) error
	exp    damagedExpect
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

var damageKinds = []string{dFlipMid, dFlip1, dFlip10, dEmpty, dRemove, dHalve, dGarbage}

// damageFile returns the damage, and the byte range [a, b) of the file
// it changes (b = size+100 for garbage); ok is false when it does not apply
// to a file of this size.
func damageFile(name, kind string, size int64) (fn func(dir string) error, a, b int64, ok bool) {
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

// damagedCases lists every case for a template.
func damagedCases(t *testing.T, tp *damagedTemplate) []damagedCase {
	t.Helper()
	var cases []damagedCase
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
			kinds := damageKinds
			if suffix == segment.LogSuffix {
				kinds = append(slices.Clone(kinds), dRename)
			}
			for _, kind := range kinds {
				label := fmt.Sprintf("%s-%s/%s", r.role, strings.TrimPrefix(suffix, "."), kind)
				if kind == dRename {
					from, to := name, segment.Name(seg.base+7, segment.LogSuffix)
					cases = append(cases, damagedCase{label, func(dir string) error {
						return os.Rename(filepath.Join(dir, from), filepath.Join(dir, to))
					}, tp.logExp(r.i, kind, 0, 0)})
					continue
				}
				fn, a, b, ok := damageFile(name, kind, sz)
				if !ok {
					continue
				}
				var exp damagedExpect
				if suffix == segment.LogSuffix {
					exp = tp.logExp(r.i, kind, a, b)
				} else {
					exp = tp.plainExp(hIndexOnly, hHealthy, hHealthy)
					exp.timesOK = suffix != segment.TimeIndexSuffix
				}
				cases = append(cases, damagedCase{label + fmt.Sprintf("@%d", a), fn, exp})
			}
		}
	}
	for _, name := range []string{metaName, cleanName, recoveryName, lockName} {
		sz, ok := size(name)
		if !ok {
			continue
		}
		for _, kind := range damageKinds {
			fn, a, _, ok := damageFile(name, kind, sz)
			if !ok {
				continue
			}
			exp := tp.plainExp(hHealthy, hHealthy, hHealthy)
			if name == metaName {
				exp.ro = hIndexOnly
			}
			cases = append(cases, damagedCase{fmt.Sprintf("%s/%s@%d", name, kind, a), fn, exp})
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
		damagedCase{fmt.Sprintf("newest-log/flip-past-the-recovery-point@%d", tailAt), flipAt(tailAt), tp.logExp(last, dFlipMid, tailAt, tailAt+1)},
		damagedCase{fmt.Sprintf("newest-log/flip-past-the-records@%d", zeroAt), flipAt(zeroAt), tp.logExp(last, dFlipMid, zeroAt, zeroAt+1)},
		damagedCase{fmt.Sprintf("newest-log/cut-below-the-recovery-point@%d", cutAt), func(dir string) error {
			return os.Truncate(filepath.Join(dir, newestName), cutAt)
		}, tp.logExp(last, dHalve, cutAt, int64(len(newestLog)))},
	)
	stray := []damagedCase{
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
func (tp *damagedTemplate) plainExp(ro, open, rec health) damagedExpect {
	return damagedExpect{touched: map[uint64]bool{}, loseFrom: tp.n, ro: ro, open: open, rec: rec, timesOK: true}
}

// logExp is the expectation for damage to bytes [a, b) of segment i's .log.
func (tp *damagedTemplate) logExp(i int, kind string, a, b int64) damagedExpect {
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

func TestOpenDamagedFiles(t *testing.T) {
	start := time.Now()
	root := caseScratchRoot(t)
	tpls := damagedTemplates(t, root)
	type job struct {
		tp    *damagedTemplate
		c     damagedCase
		dir   string
		fails []string
		took  time.Duration
	}
	var jobs []*job
	for _, tp := range tpls {
		for ci, c := range damagedCases(t, tp) {
			jobs = append(jobs, &job{tp: tp, c: c, dir: filepath.Join(root, fmt.Sprintf("%s-%03d", tp.name, ci))})
		}
	}
	// Cases are independent directories: run a few at once (they wait on
	// fsync much of the time).
	work := make(chan *job)
	var wg sync.WaitGroup
	for range damagedCaseWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				cs := time.Now()
				j.fails = runGuardedCase(60*time.Second, func(f *caseFailures) { runDamagedCase(f, j.tp, j.c, j.dir) })
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
		if os.Getenv("PAGELOG_CASE_TIMING") != "" {
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

// damagedWant is what a check of an open log compares against.
type damagedWant struct {
	tp    *damagedTemplate
	exp   damagedExpect
	extra map[uint64][]byte // records appended after the damage
}

func (w *damagedWant) body(off uint64) ([]byte, bool) {
	if b, ok := w.extra[off]; ok {
		return b, true
	}
	if off < w.tp.n {
		return w.tp.body(off), true
	}
	return nil, false
}

// protected: a record that must be served.
func (w *damagedWant) protected(off uint64) bool {
	if _, ok := w.extra[off]; ok {
		return true
	}
	return off < w.tp.n && !w.exp.touched[off] && off < w.exp.loseFrom
}

func (w *damagedWant) inMissing(off uint64) bool {
	return w.exp.missTo > 0 && off >= w.exp.missFrom && off < w.exp.missTo
}

// minNext is the lowest Next that loses no record the damage did not take
// by the torn-tail rule.
func (w *damagedWant) minNext() uint64 { return min(w.tp.n, w.exp.loseFrom) }

func runDamagedCase(f *caseFailures, tp *damagedTemplate, c damagedCase, caseDir string) {
	damaged := filepath.Join(caseDir, "damaged")
	if err := testkit.CopyDir(tp.dir, damaged, false); err != nil {
		f.add("setup: %v", err)
		return
	}
	if err := c.damage(damaged); err != nil {
		f.add("setup: damage: %v", err)
		return
	}
	want := &damagedWant{tp: tp, exp: c.exp}

	// OpenReadOnly: serves what is there, changes nothing.
	guardedPhase(f, "read-only", func() {
		before, err := testkit.HashDir(damaged, testkit.HashOptions{})
		if err != nil {
			f.add("setup: %v", err)
			return
		}
		l, err := OpenReadOnly(damaged, Options{})
		if err != nil {
			f.add("OpenReadOnly: %v", err)
			return
		}
		rep := checkDamagedLog(f, "read-only", l, want)
		c.exp.ro.check(f, "read-only", rep)
		damagedLossReported(f, "read-only", l, want, rep)
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
		after, err := testkit.HashDir(damaged, testkit.HashOptions{})
		if err != nil {
			f.add("read-only: %v", err)
		} else if d := testkit.DiffHashes(before, after); d != "" {
			f.add("read-only: the directory changed: %s", d)
		}
	})

	// Open for writing.
	guardedPhase(f, "writable", func() {
		dir := filepath.Join(caseDir, "open")
		if err := testkit.CopyDir(damaged, dir, false); err != nil {
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
		rep := checkDamagedLog(f, "writable", l, want)
		c.exp.open.check(f, "writable", rep)
		damagedLossReported(f, "writable", l, want, rep)
		next := l.Next()
		if next < want.minNext() {
			f.add("writable: Next is %d after Open, but records up to %d were appended and only %d on may be lost: the next append reuses offset %d (recovery %s)",
				next, tp.n, want.minNext(), next, describeRecovery(l.Recovery()))
		}
		body := testBody(next+1<<40, 33)
		off, err := l.Append(body)
		if err != nil || off != next {
			f.add("writable: Append after Open: offset %d, %v; want offset %d", off, err, next)
			_ = l.Close()
			return
		}
		want2 := &damagedWant{tp: tp, exp: c.exp, extra: map[uint64][]byte{off: body}}
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
		checkDamagedLogMode(f, "writable, then read-only", ro, want2, false)
		_ = ro.Close()
	})

	// Recover.
	guardedPhase(f, "Recover", func() {
		dir := filepath.Join(caseDir, "recover")
		if err := testkit.CopyDir(damaged, dir, false); err != nil {
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
		w := &damagedWant{tp: tp, exp: exp}
		v := checkDamagedLog(f, "Recover, then read-only", ro, w)
		if v.Healthy() != rep.After.Healthy() {
			f.add("Recover said healthy=%v, a read-only Verify after it says healthy=%v (problems %q, index problems %q)",
				rep.After.Healthy(), v.Healthy(), firstThreeAndCount(v.Problems), firstThreeAndCount(v.IndexProblems))
		}
		damagedLossReported(f, "Recover, then read-only", ro, w, v)
		_ = ro.Close()
	})
}

func describeRecovery(r Recovery) string {
	return fmt.Sprintf("{segments %d, active %s cut=%v end=%d next=%d torn=%d, notes %q}",
		r.Segments, r.Active.Segment, r.Active.Cut, r.Active.End, r.Active.Next, r.TruncatedBytes, r.Notes)
}

// damagedLossReported: when Next lies below what was appended, the loss must
// show: in Verify, or as a cut in the recovery report.
func damagedLossReported(f *caseFailures, who string, l *Log, w *damagedWant, rep VerifyReport) {
	if next := l.Next(); next < w.tp.n && rep.Healthy() && !l.Recovery().Active.Cut && l.Recovery().TruncatedBytes == 0 {
		f.add("%s: Next is %d but %d records were appended, and neither Verify nor the recovery report says so (recovery %s)",
			who, next, w.tp.n, describeRecovery(l.Recovery()))
	}
	if next := l.Next(); next < w.minNext() && rep.Healthy() {
		f.add("%s: records [%d, %d) (below the recovery point, or untouched) are gone and Verify says healthy",
			who, next, w.minNext())
	}
}

// checkDamagedLog reads everything through Read, Records, Inspect, Verify and
// OffsetForTime and checks it against w. It returns the Verify report.
func checkDamagedLog(f *caseFailures, who string, l *Log, w *damagedWant) VerifyReport {
	return checkDamagedLogMode(f, who, l, w, true)
}

// checkDamagedLogMode: full false checks Read and Verify only.
func checkDamagedLogMode(f *caseFailures, who string, l *Log, w *damagedWant, full bool) VerifyReport {
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
		f.add("%s: Read refused %d untouched records in all: %v", who, len(notServed), describeOffsetRanges(notServed))
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
		f.add("%s: Records did not serve %d untouched records: %v", who, len(lost), describeOffsetRanges(lost))
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
		if !ok || ri.Size != int64(headerSize+len(body)) || ri.Checksum != plainRecordChecksum(ri.Offset, body) {
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
		f.add("%s: Inspect does not call %d untouched records OK: %v", who, len(lost), describeOffsetRanges(lost))
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

// describeOffsetRanges prints offsets as ranges.
func describeOffsetRanges(offs []uint64) string {
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

// damagedCaseWorkers is how many cases run at once.
func damagedCaseWorkers() int { return max(2, min(4, runtime.NumCPU())) }
