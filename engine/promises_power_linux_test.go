//go:build linux

package engine

// The durability promises of the README, each checked under the simulated
// disk of powerdisk_linux_test.go, which loses unsynced file content and
// unsynced directory entries. Every test logs its seed; replay a failure
// with -crash.seed=N -crash.case=K. The default sizes keep them a few
// seconds each under -race; the long run:
//
//	go test ./engine -run 'TestPowerLoss' -promise.cases=2000 -promise.windows=100

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

var (
	promiseCases   = flag.Int("promise.cases", 40, "cases of each TestPowerLoss* simulation")
	promiseWindows = flag.Int("promise.windows", 6, "crashes of TestPowerLossSyncIntervalWindow")
)

// powerOptions are the settings of the simulations: small segments, so that
// a case rolls several times.
func powerOptions(policy SyncPolicy, datasync func(*os.File) error) Options {
	return Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 512, MaxRecordBytes: 1024, Sync: policy, datasync: datasync}
}

// powerExpect is what a disk image must open to.
type powerExpect struct {
	first, firstMax  uint64 // First in [first, firstMax]
	nextMin, nextMax uint64 // Next in [nextMin, nextMax]
	// whole: every offset in [First, Next) reads what was appended there
	// and Verify finds nothing wrong. Otherwise offsets below nextMin must
	// read, and the others may fail to read but never give other bytes.
	whole bool
}

// imageResult is what an image opened to.
type imageResult struct {
	next       uint64 // Next after recovery
	firstBad   uint64 // the lowest offset that failed to read (next when none did)
	unreadable int    // offsets in [First, Next) that failed to read
}

// checkPowerImage opens the image in cdir and checks it against e. It
// returns what is wrong ("" when nothing).
func checkPowerImage(cdir string, opts Options, want func(uint64) []byte, e powerExpect) (imageResult, string) {
	opts.datasync = nil
	l, err := Open(cdir, opts)
	if err != nil {
		return imageResult{}, fmt.Sprintf("Open of the image: %v", err)
	}
	defer l.Close()
	rec := l.Recovery()
	first, next := l.First(), l.Next()
	res := imageResult{next: next, firstBad: next}
	switch {
	case first < e.first || first > e.firstMax:
		return res, fmt.Sprintf("First is %d, want it in [%d, %d] (%d segments)", first, e.first, e.firstMax, len(*l.segs.Load()))
	case next < e.nextMin:
		return res, fmt.Sprintf("Next is %d: records [%d, %d) that must survive are lost (recovery %+v, notes %q)",
			next, next, e.nextMin, rec.Active, rec.Notes)
	case next > e.nextMax:
		return res, fmt.Sprintf("Next is %d, want it in [%d, %d]: records past what was written, or what was cut, are back (notes %q)",
			next, e.nextMin, e.nextMax, rec.Notes)
	}
	for off := first; off < next; off++ {
		r, err := l.Read(off)
		if err != nil {
			if e.whole || off < e.nextMin {
				return res, fmt.Sprintf("Read(%d) in [%d, %d): %v (recovery %+v, notes %q)", off, first, next, err, rec.Active, rec.Notes)
			}
			res.firstBad = min(res.firstBad, off)
			res.unreadable++
			continue
		}
		ok := string(r.Body) == string(want(off))
		r.Release()
		if !ok {
			return res, fmt.Sprintf("Read(%d): not the body appended at that offset: stale or damaged record served", off)
		}
	}
	if e.whole {
		if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
			return res, fmt.Sprintf("Verify: %v, %d damaged, first %+v, index problems %q, missing %+v",
				err, rep.Damaged, rep.FirstDamage, rep.IndexProblems, l.Gaps(first))
		}
	}
	again := crashBody(next, ^uint64(0), 0, 600)
	if off, err := l.Append(again); err != nil || off != next {
		return res, fmt.Sprintf("Append after recovery: offset %d, %v; want %d", off, err, next)
	}
	if msg := crashCheckRange(l, next, next+1, func(uint64) []byte { return again }); msg != "" {
		return res, "reading back the append after recovery: " + msg
	}
	return res, ""
}

// powerCase is one case of a simulation: its random source, its disk, the
// bodies it appends (crashBody with the case's salt), and how it reports a
// failure: with the seed and case that replay it.
type powerCase struct {
	t    *testing.T
	c    int
	seed uint64
	rng  *rand.Rand
	root string
	d    *powerDisk
	what string // what the case does, for a failure
}

// powerCases runs n cases of a simulation (only -crash.case when set),
// each on a disk of its own.
func powerCases(t *testing.T, n int, run func(pc *powerCase)) {
	seed := crashSeedFor(t)
	scratch := crashScratchDir(t)
	for c := range n {
		if *crashCase >= 0 && c != *crashCase {
			continue
		}
		root, err := os.MkdirTemp(scratch, "case")
		if err != nil {
			t.Fatal(err)
		}
		pc := &powerCase{t: t, c: c, seed: seed, rng: crashRand(seed, uint64(c)+1), root: root, d: newPowerDisk(t, root)}
		run(pc)
		pc.d.close()
		_ = os.RemoveAll(root)
	}
}

func (pc *powerCase) want(off uint64) []byte { return crashBody(off, uint64(pc.c)+1, 0, 600) }

func (pc *powerCase) fail(format string, args ...any) {
	pc.t.Helper()
	what := ""
	if pc.what != "" {
		what = pc.what + "; "
	}
	pc.t.Fatalf("case %d (%scrash %s; replay: -crash.seed=%d -crash.case=%d): %s",
		pc.c, what, pc.d.how, pc.seed, pc.c, fmt.Sprintf(format, args...))
}

func (pc *powerCase) open(opts Options) *Log {
	pc.t.Helper()
	l, err := Open(pc.d.dir, opts)
	if err != nil {
		pc.fail("Open: %v", err)
	}
	return l
}

// crashPoint picks where the power fails: in a third of the cases
// between two of the steps operations (it returns after how many), in
// the others inside a hook call, the k-th of about calls (it returns
// steps: the crash may not come, and then comes after the last step).
func (pc *powerCase) crashPoint(steps, calls int) int {
	if pc.rng.IntN(3) == 0 {
		return pc.rng.IntN(steps + 1)
	}
	pc.d.crashAt = 1 + pc.rng.IntN(calls)
	return steps
}

// images builds images of the crash the disk took (a few per crash: the
// run that led to it costs more than an image) and checks each.
func (pc *powerCase) images(opts Options, e powerExpect, st *imageStats) []imageResult {
	pc.t.Helper()
	var out []imageResult
	for i := range 3 {
		cdir := filepath.Join(pc.root, fmt.Sprintf("image%d", i))
		state := pc.d.img.build(pc.t, pc.rng, cdir, st)
		res, msg := checkPowerImage(cdir, opts, pc.want, e)
		if msg != "" {
			pc.fail("image %d (%s; files of unknown content: %d unseen, %d mislinked): %s",
				i, state, pc.d.unseen, pc.d.mislinked, msg)
		}
		out = append(out, res)
		_ = os.RemoveAll(cdir)
	}
	return out
}

// appendAcked appends the case's record at Next and reports whether the
// crash came first (the append is then not acknowledged, whatever it
// returned).
func (pc *powerCase) appendAcked(l *Log) (crashed bool) {
	pc.t.Helper()
	off := l.Next()
	got, err := l.Append(pc.want(off))
	if pc.d.isCrashed() {
		return true
	}
	if err != nil || got != off {
		pc.fail("Append: %d, %v; want %d", got, err, off)
	}
	return false
}

// TestPowerLossSealedBeforeSuccessor: under SyncAlways, a directory sync
// never makes a segment's successor durable before the segment's .log,
// .index and .timeindex are synced as sealed (checked at every directory
// sync), and a power failure anywhere (between appends, inside any file or
// directory sync) keeps every acknowledged record, with the directory's
// unsynced entries lost or kept.
func TestPowerLossSealedBeforeSuccessor(t *testing.T) {
	var st imageStats
	var acked, fileSyncs, dirSyncs int
	powerCases(t, *promiseCases, func(pc *powerCase) {
		pc.d.checkDir = sealedSyncedBeforeSuccessor
		opts := powerOptions(SyncAlways, pc.d.datasync)
		n := 50 + pc.rng.IntN(351)
		stop := pc.crashPoint(n, n+n/8+2) // a sync per append, four per roll
		l := pc.open(opts)
		var ack, written uint64
		for i := 0; i < stop && !pc.d.isCrashed(); i++ {
			written = l.Next() + 1
			if pc.appendAcked(l) {
				break
			}
			ack = written
		}
		pc.d.crash("between appends")
		if err := l.Close(); err != nil {
			pc.fail("Close: %v", err)
		}
		if v := pc.d.violations; len(v) > 0 {
			pc.fail("%d violations, the first: %s", len(v), v[0])
		}
		dirSyncs += pc.d.dirSyncs
		fileSyncs += pc.d.fileSyncs
		pc.images(opts, powerExpect{nextMin: ack, nextMax: written, whole: true}, &st)
		acked += int(ack)
	})
	t.Logf("%d acknowledged records kept, %d file syncs, %d directory syncs checked (sealed segments synced before their successor's entry)",
		acked, fileSyncs, dirSyncs)
	t.Log(st.report())
}

// TestPowerLossBeforeIndexFilesNamed: a roll names the new segment's .log
// (a directory sync under SyncAlways makes the name durable) and its
// goroutine names the index files after, beside the appends that follow.
// The power fails while that goroutine waits, after a few more appends:
// the disk then holds the new .log (durable) with its index files under
// their prepared names, and any prefix of the directory operations since
// the sync. Every acknowledged record must survive, Verify must find the
// log whole, and no violation of the sealed-before-successor order is
// seen at any directory sync. Under SyncNone a Sync after the roll covers
// the records instead.
func TestPowerLossBeforeIndexFilesNamed(t *testing.T) {
	var st imageStats
	var acked, states int
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		powerCases(t, max(*promiseCases/4, 2), func(pc *powerCase) {
			pc.what = fmt.Sprintf("policy %v", policy)
			if policy == SyncAlways {
				pc.d.checkDir = sealedSyncedBeforeSuccessor
			}
			opts := powerOptions(policy, pc.d.datasync)
			l := pc.open(opts)
			entered, release := blockNaming(pc.t, l)
			var written uint64
			appendOne := func() {
				written = l.Next() + 1
				if pc.appendAcked(l) {
					pc.fail("the power failed before the test made it fail")
				}
			}
			// Half of the first segment, then the offer, then the roll.
			for l.active.End() < l.cfg.SegmentBytes/2+1024 {
				appendOne()
			}
			waitPreparedOffered(pc.t, l)
			base := l.active.Base()
			for l.active.Base() == base {
				appendOne()
			}
			base = l.active.Base()
			for range pc.rng.IntN(12) {
				appendOne()
			}
			if policy == SyncNone {
				if err := l.Sync(); err != nil {
					pc.fail("Sync: %v", err)
				}
			}
			<-entered
			for _, name := range []string{segment.Name(base, segment.LogSuffix), segment.PreparedPrefix + segment.IndexSuffix, segment.PreparedPrefix + segment.TimeIndexSuffix} {
				if _, err := os.Stat(filepath.Join(pc.d.dir, name)); err != nil {
					pc.fail("the state under test: %v", err)
				}
			}
			states++
			if pc.c%2 == 1 {
				// Or once the goroutine renamed them, before any
				// directory sync covered the renames: the images keep
				// none, one or both.
				release()
				if !l.awaitNamed() {
					pc.fail("closed while naming")
				}
				pc.d.crash("after a roll's goroutine named the index files, before a directory sync")
			} else {
				pc.d.crash("after a roll, before its goroutine named the index files")
			}
			release()
			if err := l.Close(); err != nil {
				pc.fail("Close: %v", err)
			}
			if v := pc.d.violations; len(v) > 0 {
				pc.fail("%d violations, the first: %s", len(v), v[0])
			}
			pc.images(opts, powerExpect{nextMin: written, nextMax: written, whole: true}, &st)
			acked += int(written)
		})
	}
	t.Logf("%d crashes before the index files were named, %d acknowledged records kept", states, acked)
	t.Log(st.report())
}

// TestPowerLossSyncNoneCovered: under SyncNone, a record covered by a
// Sync() or a WaitDurable that returned survives a power failure, wherever
// it comes: between operations, or inside any sync (of a sealed segment,
// the directory, the active segment). Records no sync covered may be lost
// or unreadable, but no offset ever reads bytes other than its record's.
func TestPowerLossSyncNoneCovered(t *testing.T) {
	var st imageStats
	var covered, syncs, waits, unreadable int
	powerCases(t, *promiseCases, func(pc *powerCase) {
		opts := powerOptions(SyncNone, pc.d.datasync)
		n := 50 + pc.rng.IntN(351)
		stop := pc.crashPoint(n, n/4+2) // about three syncs per Sync or WaitDurable
		l := pc.open(opts)
		var cov, written uint64
		for i := 0; i < stop && !pc.d.isCrashed(); i++ {
			switch r := pc.rng.IntN(100); {
			case r < 6:
				target := l.Next()
				err := l.Sync()
				if pc.d.isCrashed() {
					break
				}
				if err != nil {
					pc.fail("Sync: %v", err)
				}
				cov = max(cov, target)
				syncs++
			case r < 12 && l.Next() > 0:
				off := pc.rng.Uint64N(l.Next())
				err := l.WaitDurable(context.Background(), off)
				if pc.d.isCrashed() {
					break
				}
				if err != nil {
					pc.fail("WaitDurable(%d): %v", off, err)
				}
				cov = max(cov, off+1)
				waits++
			case r < 16:
				from := l.Next()
				bodies := make([][]byte, 1+pc.rng.IntN(8))
				for k := range bodies {
					bodies[k] = pc.want(from + uint64(k))
				}
				written = from + uint64(len(bodies))
				got, k, err := l.AppendBatch(bodies, nil)
				if err != nil || got != from || k != len(bodies) {
					pc.fail("AppendBatch: %d, %d, %v; want %d, %d", got, k, err, from, len(bodies))
				}
			default:
				written = l.Next() + 1
				pc.appendAcked(l)
			}
		}
		pc.d.crash("between operations")
		if err := l.Close(); err != nil {
			pc.fail("Close: %v", err)
		}
		if v := pc.d.violations; len(v) > 0 {
			pc.fail("%s", v[0])
		}
		for _, r := range pc.images(opts, powerExpect{nextMin: cov, nextMax: written}, &st) {
			unreadable += r.unreadable
		}
		covered += int(cov)
	})
	t.Logf("%d Sync and %d WaitDurable calls; %d covered records kept; %d uncovered offsets unreadable after recovery (allowed)",
		syncs, waits, covered, unreadable)
	t.Log(st.report())
}

// TestPowerLossSyncIntervalWindow: under SyncInterval, a power failure
// loses at most the records appended since the last background sync, and
// those syncs come every interval. An appender appends steadily (segments
// roll, sealed in the background); the power fails at a random moment
// between two appends. Checked: no record that a completed sync covered is
// lost (exact: Durable at the crash), and the sync rounds the hook sees
// come one interval apart (their median gap: a loaded machine delays some,
// a wrong period moves them all). The oldest record lost, and how long
// before the failure it was appended, is logged.
func TestPowerLossSyncIntervalWindow(t *testing.T) {
	const interval = 50 * time.Millisecond
	var st imageStats
	var worst time.Duration
	var lostTotal, ackedTotal int
	var gaps []time.Duration
	powerCases(t, *promiseWindows, func(pc *powerCase) {
		d := pc.d
		var rounds []time.Time // when each sync round began (its first hook call)
		// A round's hook calls (its sealed segments', then the active
		// one's) are told apart from the next round's by the count of
		// rounds run, not by a pause between them: on a loaded machine a
		// round's calls came more than a quarter interval apart.
		var opened atomic.Pointer[Log]
		last := int64(-1)
		opts := powerOptions(SyncInterval, func(f *os.File) error {
			now := time.Now()
			round := int64(-2) // at the open
			if l := opened.Load(); l != nil {
				round = l.sync.syncs.Load()
			}
			d.mu.Lock()
			if round != last {
				rounds = append(rounds, now)
			}
			last = round
			d.mu.Unlock()
			err := d.datasync(f)
			// The device takes its time: appends go on meanwhile, and a
			// sync must not count them as covered.
			time.Sleep(2 * time.Millisecond)
			return err
		})
		opts.SyncInterval = interval
		l := pc.open(opts)
		opened.Store(l)
		crashAfter := 6*interval + time.Duration(pc.rng.Int64N(int64(6*interval)))
		start := time.Now()
		var acks []time.Time // acks[off]: when Append returned
		var durable uint64
		var crashedAt time.Time
		for {
			if time.Since(start) >= crashAfter {
				durable = l.Durable()
				// The time before the crash, not after it: a round that
				// began while the crash took its picture (hundreds of
				// milliseconds under load) synced nothing, and the round
				// before it may have had its last sync cut off.
				crashedAt = time.Now()
				d.crash(fmt.Sprintf("between appends, %v after Open", crashAfter))
				break
			}
			pc.appendAcked(l)
			acks = append(acks, time.Now())
			// A steady stream, not a flood.
			time.Sleep(200 * time.Microsecond)
		}
		if err := l.Close(); err != nil {
			pc.fail("Close: %v", err)
		}
		d.mu.Lock()
		var floor time.Time // the start of the last sync round that ended before the failure
		for i := 1; i < len(rounds) && rounds[i].Before(crashedAt); i++ {
			gaps = append(gaps, rounds[i].Sub(rounds[i-1]))
			floor = rounds[i-1] // round i began after it ended
		}
		d.mu.Unlock()
		ack := uint64(len(acks))
		if durable > ack {
			pc.fail("Durable %d above the %d records appended", durable, ack)
		}
		// Offsets below Durable at the crash must read (a completed sync
		// covered them); past it, any may be lost or unreadable.
		for _, r := range pc.images(opts, powerExpect{nextMin: durable, nextMax: ack}, &st) {
			if lost := r.firstBad; lost < ack {
				worst = max(worst, crashedAt.Sub(acks[lost]))
				lostTotal += int(ack - lost)
				// The loss bound, from the syncs the hook saw: a record
				// appended before the last completed round began was
				// synced by it.
				if acks[lost].Before(floor) {
					pc.fail("record %d, appended %v before the failure, is lost: the sync round that began %v before the failure, and ended, covered it",
						lost, crashedAt.Sub(acks[lost]), crashedAt.Sub(floor))
				}
			}
			ackedTotal += int(ack)
		}
	})
	// At least 6 rounds a run come on time; a loaded machine delays some
	// (23 gaps in 6 runs at load 20), and the median below checks the
	// period: this only catches a syncer that hardly runs.
	if len(gaps) < 2**promiseWindows {
		t.Fatalf("%d sync rounds in %d runs of at least %v each: the background sync does not run every %v",
			len(gaps), *promiseWindows, 6*interval, interval)
	}
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	if median < interval/2 || median > interval*3/2 {
		t.Fatalf("the median gap between background syncs is %v, want about the interval %v (gaps %v)", median, interval, gaps)
	}
	t.Logf("SyncInterval %v: %d sync rounds, gaps median %v, max %v; %d records appended over the images, %d lost, "+
		"none a completed sync covered; the oldest lost was appended %v before the failure",
		interval, len(gaps), median, gaps[len(gaps)-1], ackedTotal, lostTotal, worst.Round(time.Millisecond))
	if lostTotal == 0 {
		t.Fatalf("no disk image lost a record: no failure came after appends not yet synced (%s)", st.report())
	}
	t.Log(st.report())
}

// TestPowerLossTruncateAndDrop: Truncate and DropBefore are crash-safe. A
// log of several segments, all of it synced (SyncAlways, or SyncNone and
// Sync), is cut by Truncate(x) or has its oldest segments dropped by
// DropBefore(x); the power fails inside the operation (in any of its
// syncs, with any prefix of its directory operations durable) or just
// after it returned. Before it returned, the log must be the old one
// minus some newest records (Truncate) or some oldest segments
// (DropBefore), never with a gap; after, exactly the new one. Some cases
// close and reopen the log first, so that a stale clean-close marker is on
// disk when the operation runs.
func TestPowerLossTruncateAndDrop(t *testing.T) {
	var st imageStats
	counts := map[string]int{}
	powerCases(t, *promiseCases, func(pc *powerCase) {
		rng := pc.rng
		policy := []SyncPolicy{SyncAlways, SyncNone}[rng.IntN(2)]
		opts := powerOptions(policy, pc.d.datasync)
		pc.what = policy.String()
		l := pc.open(opts)
		appendSome := func(k int) {
			for range k {
				pc.appendAcked(l)
			}
		}
		appendSome(60 + rng.IntN(300))
		if rng.IntN(3) == 0 {
			// Close writes log.clean; the reopen removes it, and only a
			// later directory sync makes the removal durable.
			if err := l.Close(); err != nil {
				pc.fail("Close: %v", err)
			}
			l = pc.open(opts)
			appendSome(rng.IntN(20))
		}
		if err := l.Sync(); err != nil {
			pc.fail("Sync: %v", err)
		}
		next := l.Next()
		var bases []uint64
		for _, s := range *l.segs.Load() {
			bases = append(bases, s.Base())
		}
		truncate := rng.IntN(2) == 0
		x := rng.Uint64N(next + 1)
		if !truncate {
			x = rng.Uint64N(next + 30)
		}
		// Crash inside the operation's k-th hook call (Truncate makes 3:
		// the copy, the new active segment, the directory; DropBefore 1),
		// or just after it returned.
		calls := 1
		if truncate {
			calls = 3
		}
		if k := rng.IntN(calls + 1); k > 0 {
			pc.d.mu.Lock()
			pc.d.crashAt = pc.d.calls + k
			pc.d.mu.Unlock()
		}
		var dropped int
		var err error
		if truncate {
			pc.what = fmt.Sprintf("Truncate(%d) of [0, %d) in segments %v under %v", x, next, bases, policy)
			err = l.Truncate(x)
		} else {
			pc.what = fmt.Sprintf("DropBefore(%d) of [0, %d) in segments %v under %v", x, next, bases, policy)
			dropped, err = l.DropBefore(x)
		}
		inside := pc.d.isCrashed()
		if !inside && err != nil {
			pc.fail("%v", err)
		}
		pc.d.crash("just after the operation returned")
		_ = l.Close()
		if v := pc.d.violations; len(v) > 0 {
			pc.fail("%s", v[0])
		}
		// DropBefore(x) keeps the segment holding x and those after it
		// (the active one always).
		newFirst := bases[0]
		for _, b := range bases {
			if b <= x {
				newFirst = b
			}
		}
		if !truncate && !inside && bases[dropped] != newFirst {
			pc.fail("DropBefore dropped %d segments, want %d", dropped, slices.Index(bases, newFirst))
		}
		e := powerExpect{nextMin: next, nextMax: next, whole: true}
		switch {
		case truncate && inside:
			e.nextMin = x
		case truncate:
			e.nextMin, e.nextMax = x, x
		case inside:
			e.firstMax = newFirst
		default:
			e.first, e.firstMax = newFirst, newFirst
		}
		op, when := "DropBefore", "after it returned"
		if truncate {
			op = "Truncate"
		}
		if inside {
			when = "inside"
		}
		counts[op+", crash "+when]++
		pc.images(opts, e, &st)
	})
	t.Logf("cases: %v", counts)
	t.Log(st.report())
}

// TestPowerLossRetention: the drops of retention (Options.RetentionBytes,
// at each roll, on a goroutine of their own, through DropBefore's path)
// are crash-safe. Records are appended under SyncAlways, or SyncNone with
// a Sync now and then, while retention keeps the log at a few segments;
// the power fails anywhere. The log must open, hold every record that must
// survive, start no later than it did at the crash (a drop not yet durable
// may bring old segments back, whole), and have no gap.
func TestPowerLossRetention(t *testing.T) {
	var st imageStats
	var maxDropped uint64
	powerCases(t, *promiseCases, func(pc *powerCase) {
		policy := []SyncPolicy{SyncAlways, SyncNone}[pc.rng.IntN(2)]
		pc.what = policy.String()
		opts := powerOptions(policy, pc.d.datasync)
		opts.RetentionBytes = 3 * opts.SegmentBytes
		n := 200 + pc.rng.IntN(401)
		calls := n + n/8 + 2
		if policy == SyncNone {
			calls = n/10 + 2
		}
		stop := pc.crashPoint(n, calls)
		l := pc.open(opts)
		var firstAtCrash uint64
		pc.d.onCrash = func() { firstAtCrash = l.First() }
		var ack, written uint64
		for i := 0; i < stop && !pc.d.isCrashed(); i++ {
			written = l.Next() + 1
			if pc.appendAcked(l) {
				break
			}
			if policy == SyncAlways {
				ack = written
			} else if pc.rng.IntN(20) == 0 {
				err := l.Sync()
				if pc.d.isCrashed() {
					break
				}
				if err != nil {
					pc.fail("Sync: %v", err)
				}
				ack = written
			}
		}
		pc.d.crash("between appends")
		if err := l.Close(); err != nil {
			pc.fail("Close: %v", err)
		}
		maxDropped = max(maxDropped, firstAtCrash)
		pc.images(opts, powerExpect{firstMax: firstAtCrash, nextMin: ack, nextMax: written, whole: policy == SyncAlways}, &st)
	})
	if maxDropped == 0 {
		t.Fatal("retention never dropped a segment: the test tests nothing")
	}
	t.Logf("retention dropped up to offset %d", maxDropped)
	t.Log(st.report())
}

// TestPowerDiskLosesUnsyncedEntries checks the simulation itself: a file
// created (or removed, or renamed) after the last directory sync may be
// gone (back, not renamed) in an image, and is as the page cache holds it
// once a directory sync covered it.
func TestPowerDiskLosesUnsyncedEntries(t *testing.T) {
	root := crashScratchDir(t)
	d := newPowerDisk(t, root)
	write := func(name, s string) {
		crashWrite(t, filepath.Join(d.dir, name), []byte(s))
	}
	write("a", "one")
	write("b", "two")
	if err := syncDir(d.dir); err != nil {
		t.Fatal(err)
	}
	write("c", "three")
	if err := os.Rename(filepath.Join(d.dir, "a"), filepath.Join(d.dir, "a2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d.dir, "b")); err != nil {
		t.Fatal(err)
	}
	d.crash("after three unsynced operations")
	if d.dirSyncs != 1 {
		t.Fatalf("%d directory syncs reached the hook, want 1", d.dirSyncs)
	}
	seen := map[string]bool{}
	var st imageStats
	rng := crashRand(1, 1)
	for i := range 64 {
		cdir := filepath.Join(root, fmt.Sprintf("img%d", i))
		d.img.build(t, rng, cdir, &st)
		entries, err := os.ReadDir(cdir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		seen[strings.Join(names, ",")] = true
	}
	// The operations after the sync, in order: create c, rename a to a2,
	// remove b. Each prefix is a possible directory; no other is.
	wantStates := []string{"a,b", "a,b,c", "a2,b,c", "a2,c"}
	for _, s := range wantStates {
		if !seen[s] {
			t.Errorf("no image holds the directory %q (images: %v)", s, seen)
		}
	}
	if len(seen) != len(wantStates) {
		t.Errorf("images hold %d directory states %v, want the %d prefixes %v", len(seen), seen, len(wantStates), wantStates)
	}
	// A renamed file keeps its content; the removed one comes back whole
	// (its content never reached a sync: it may be torn, but only to
	// zeros or nothing).
	if got := string(d.img.current[d.durable["a"]]); got != "one" {
		t.Errorf("file a holds %q in the image, want %q", got, "one")
	}
}
