//go:build linux

package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/mmapfile"
)

// The prepared segment is offered before it is faulted in: the preparer
// allocates the next segment's first part, offers it to rolls at once and
// then faults it in chunk by chunk while it is still the prepared one, so
// a roll may rename and activate it (segment.Activate) while a chunk is in
// flight, and the writer, the prefaulter, Truncate, DropBefore, retention
// and Close then meet a segment that the preparer still touches. These
// tests make those meetings happen (rolls, full disks, files changed by
// hand, kills, followers in other processes) and check that no record is
// lost or changed and no prepared file is left behind.

var preparedRounds = flag.Int("prepared.rounds", 1, "multiplier of the loop counts of the TestPrepared* tests in roll_prepared_test.go")

// bodyPattern is a block of pseudo-random bytes that bodies are cut from. It
// lives outside the Go heap, as do the large bodies of the tests (see
// scratchMapping): the race detector then leaves their copies and comparisons
// alone (16 MiB copies through its shadow memory took seconds).
var bodyPattern = sync.OnceValue(func() []byte {
	b, err := unix.Mmap(-1, 0, 1<<20+1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	r := rand.New(rand.NewPCG(7, 11))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
})

// scratchMapping is an anonymous mapping of n bytes, unmapped when the test ends.
func scratchMapping(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

// bodyPatternStart is where in bodyPattern the body of the record at off begins.
func bodyPatternStart(off uint64) int { return int(off * 2654435761 % (1 << 16)) }

// fillPatternBody makes b the body of the record at off: cut from bodyPattern at a place
// that depends on off, with off in its first and last 8 bytes.
func fillPatternBody(b []byte, off uint64) {
	pat, k, n := bodyPattern(), bodyPatternStart(off), len(b)
	for i := 0; i < n; i += 1 << 20 {
		copy(b[i:], pat[k:k+1<<20])
	}
	if n >= 8 {
		binary.BigEndian.PutUint64(b, off)
	}
	if n >= 16 {
		binary.BigEndian.PutUint64(b[n-8:], ^off)
	}
}

// patternBody is the body of n bytes of the record at off (see fillPatternBody).
func patternBody(off uint64, n int) []byte {
	b := make([]byte, n)
	fillPatternBody(b, off)
	return b
}

// matchesPatternBody reports whether body is the body of n bytes of the record at off.
func matchesPatternBody(body []byte, off uint64, n int) bool {
	if len(body) != n {
		return false
	}
	head, tail := 0, n
	if n >= 8 {
		if binary.BigEndian.Uint64(body) != off {
			return false
		}
		head = 8
	}
	if n >= 16 {
		if binary.BigEndian.Uint64(body[n-8:]) != ^off {
			return false
		}
		tail = n - 8
	}
	pat, k := bodyPattern(), bodyPatternStart(off)
	for i := head; i < tail; {
		j := min(tail, (i>>20+1)<<20) // within one copy of the pattern
		if !bytes.Equal(body[i:j], pat[k+i&(1<<20-1):k+i&(1<<20-1)+j-i]) {
			return false
		}
		i = j
	}
	return true
}

// checkPatternRecord reads off and compares it with the body of n bytes it was given.
func checkPatternRecord(l *Log, off uint64, n int) error {
	r, err := l.Read(off)
	if err != nil {
		return fmt.Errorf("Read(%d): %w", off, err)
	}
	defer r.Release()
	if r.Offset != off || !matchesPatternBody(r.Body, off, n) {
		return fmt.Errorf("Read(%d): offset %d, body of %d bytes; want the %d bytes appended", off, r.Offset, len(r.Body), n)
	}
	return nil
}

// patternSizeIn is the body size of the record at off in a log of segments of
// seg bytes, for the tests that do not choose sizes themselves: mixedSize
// (some records larger than a 4 KiB segment), 64 times larger for
// segments of a MiB or more, so that they roll every few hundred records.
func patternSizeIn(seg int64, off uint64) int {
	if seg >= 1<<20 {
		return 64 * mixedSize(off)
	}
	return mixedSize(off)
}

// checkAllPatternRecords reads every record of l, each of patternSizeIn, with Read and with
// Records, and verifies the log. Retention may drop records from the
// front meanwhile: a record below First may be gone, no other.
func checkAllPatternRecords(t *testing.T, l *Log, what string) {
	t.Helper()
	seg := l.SegmentBytes()
	for off := l.First(); off < l.Next(); off++ {
		if err := checkPatternRecord(l, off, patternSizeIn(seg, off)); err != nil && !(errors.Is(err, ErrNotFound) && off < l.First()) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	want, trimmed := l.First(), false
	for r, err := range l.Records(want) {
		if err != nil {
			if !errors.Is(err, ErrTrimmed) {
				t.Fatalf("%s: Records at %d: %v", what, want, err)
			}
			trimmed = true // the iteration goes on at First
			continue
		}
		if trimmed && r.Offset > want {
			want, trimmed = r.Offset, false
		}
		if r.Offset != want || !matchesPatternBody(r.Body, want, patternSizeIn(seg, want)) {
			t.Fatalf("%s: Records gave offset %d (%d bytes), want %d", what, r.Offset, len(r.Body), want)
		}
		want++
	}
	if want != l.Next() {
		t.Fatalf("%s: Records ended at %d, Next is %d", what, want, l.Next())
	}
	verifyHealthy(t, l, what)
}

// closedLeftovers lists the files of dir that no closed log may leave: a
// prepared segment's, files kept for reuse, temporary copies.
func closedLeftovers(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, segment.PreparedPrefix) || isRecycledName(n) || strings.HasSuffix(n, ".tmp") {
			out = append(out, n)
		}
	}
	return out
}

// closedLeftoversAfterOpen is closedLeftovers of the directory of a log just
// opened, whose checkpointer may be writing log.recovery through a
// temporary file at that moment: a temporary file that goes within a few
// seconds is its own, not one left behind.
func closedLeftoversAfterOpen(dir string) []string {
	left := closedLeftovers(dir)
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
		if slices.ContainsFunc(left, func(n string) bool { return !strings.HasSuffix(n, ".tmp") }) {
			return left
		}
		time.Sleep(time.Millisecond)
		left = closedLeftovers(dir)
	}
	return left
}

// closeLeavesNothing closes l and checks that Close reports nothing and leaves
// no prepared, recycled or temporary file behind.
func closeLeavesNothing(t *testing.T, l *Log, what string) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("%s: Close: %v", what, err)
	}
	if left := closedLeftovers(l.Dir()); len(left) > 0 {
		t.Fatalf("%s: Close left %v", what, left)
	}
}

// preparerOverlapsRoll reports whether the preparer is still at the segment a roll
// has just taken: preparing, with nothing prepared (no kick has come
// since, see the callers).
func preparerOverlapsRoll(l *Log) bool {
	l.rolls.mu.Lock()
	defer l.rolls.mu.Unlock()
	return l.rolls.preparing && l.rolls.prepared == nil
}

// A roll (an append, or SkipTo), Close, Truncate or DropBefore right after
// the preparer offers a segment of 16 MiB, whose first 2 MiB it then
// faults in over 32 chunks: the roll takes the segment while a chunk is in
// flight (the test counts the rolls after which the preparer was still at
// it, and fails if it never sees one where faulting is expected), and the
// record that rolls is written beside the preparer and the prefaulter.
// Each cycle fills the active segment past half with one record, waits for
// the offer, then acts. Left alone ("idle"), the preparer faults in
// exactly the part it allocated, the first eighth; under SyncAlways it
// faults in nothing. After every cycle the newest records read back; at
// the end every record reads back, Verify is healthy (but for the ranges
// SkipTo left), Close leaves no prepared file, and a reopen reads the same.
func TestPreparedTakenWhileFaulting(t *testing.T) {
	modes := []struct {
		name   string
		sync   SyncPolicy
		spare  int
		action string
		seg    int64 // 16 MiB when 0
		retire bool  // Options.RetireMappings
	}{
		{"roll", SyncNone, 0, "roll", 0, false},
		{"roll-interval", SyncInterval, 0, "roll", 0, false},
		{"roll-always", SyncAlways, 0, "roll", 0, false},
		// 32 MiB: the first step is 2 MiB and Preallocate grows the file
		// to 4 MiB, mapping it again in the read-only view.
		{"roll-retire-32MiB", SyncNone, 0, "roll", 32 << 20, true},
		{"skip", SyncNone, 0, "skip", 0, false},
		{"idle", SyncNone, 0, "idle", 0, false},
		{"idle-32MiB", SyncInterval, 0, "idle", 32 << 20, true},
		{"close-at-offer", SyncNone, 0, "close", 0, false},
		{"close-after-roll", SyncInterval, 0, "close-after-roll", 0, false},
		{"truncate-after-roll", SyncNone, 0, "truncate", 0, false},
		{"drop-after-roll", SyncNone, 0, "drop", 0, false},
		{"drop-recycled", SyncNone, 2, "drop", 0, true},
		{"drop-recycled-interval", SyncInterval, 1, "drop", 0, false},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			segBytes := int64(16 << 20)
			if m.seg > 0 {
				segBytes = m.seg
			}
			opts := Options{SegmentBytes: segBytes, MaxRecordBytes: int(segBytes), Sync: m.sync,
				SyncInterval: time.Millisecond, RecycleSegments: m.spare, RetireMappings: m.retire}
			l := mustOpen(t, dir, opts)
			sizes := map[uint64]int{}
			scratch := scratchMapping(t, int(segBytes))
			add := func(n int) uint64 {
				t.Helper()
				want := l.Next()
				body := scratch[:n]
				fillPatternBody(body, want)
				off, err := l.Append(body)
				if err != nil || off != want {
					t.Fatalf("Append of %d bytes: %d, %v; want offset %d", n, off, err, want)
				}
				sizes[off] = n
				return off
			}
			end := func() int64 {
				l.mu.Lock()
				defer l.mu.Unlock()
				return l.active.End()
			}
			// The record that rolls: it does not fit in the 4080 bytes
			// the big one leaves, and stays below half of the new segment
			// (no kick: the preparer, seen preparing afterwards, is still
			// at the segment taken).
			const rollBody = 8 << 10
			// A roll comes right after the offer, and the preparer has a
			// new segment's pages to fault in.
			faulting := m.sync != SyncAlways && m.spare == 0
			switch m.action {
			case "close", "skip", "idle":
				faulting = false
			}
			minCycles, maxCycles := 4**preparedRounds, 24**preparedRounds
			overlaps, cycles, recycled, skipped := 0, 0, uint64(0), uint64(0)
			for ; cycles < maxCycles && (cycles < minCycles || faulting && overlaps < 2); cycles++ {
				e := end()
				if e >= segBytes/2 {
					t.Fatalf("cycle %d starts at %d, past half of the segment", cycles, e)
				}
				big := add(int(segBytes - e - 4096 - headerSize)) // to 4080 bytes short of the end
				waitPreparedOffered(t, l)
				switch {
				case m.sync == SyncAlways:
					// Records go in with pwrite: nothing is faulted in.
					if p := preparedSegment(l).Populated(); p != 0 {
						t.Fatalf("cycle %d: %d bytes of the prepared segment faulted in under SyncAlways", cycles, p)
					}
				case m.action == "idle":
					// No roll comes: the preparer faults in the first
					// eighth of the segment at most, no further than the
					// prefaulter's distance ahead (at most 8 MiB),
					// allocated as far and no further, and stops.
					part := min(segBytes/8, 8<<20)
					waitFor(t, "the preparer to finish", func() bool {
						l.rolls.mu.Lock()
						defer l.rolls.mu.Unlock()
						return !l.rolls.preparing
					})
					st, err := os.Stat(filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix))
					if err != nil {
						t.Fatal(err)
					}
					if p := preparedSegment(l).Populated(); p != st.Size() || p > part || p < min(2<<20, part) {
						t.Fatalf("cycle %d: the prepared segment, left alone: %d bytes faulted in, %d allocated; want the same, %d to %d",
							cycles, p, st.Size(), min(2<<20, part), part)
					}
				}
				switch m.action {
				case "close":
					closeLeavesNothing(t, l, fmt.Sprintf("cycle %d", cycles))
					l = mustOpen(t, dir, opts)
					if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 {
						t.Fatalf("cycle %d: the reopen after Close found %+v", cycles, rec)
					}
					// The active segment is past half: the next record
					// rolls into a segment the roll creates.
					add(rollBody)
					continue
				case "skip":
					// SkipTo rolls too: the segment offered becomes the
					// active one at a base past a gap.
					to := l.Next() + 1000
					if err := l.SkipTo(to); err != nil {
						t.Fatalf("cycle %d: SkipTo(%d): %v", cycles, to, err)
					}
					skipped += 1000
					if err := checkPatternRecord(l, big, sizes[big]); err != nil {
						t.Fatalf("cycle %d: %v", cycles, err)
					}
					if _, err := l.Read(to - 1); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("cycle %d: Read(%d) of a skipped offset: %v, want ErrCorrupt", cycles, to-1, err)
					}
					continue
				}
				roller := add(rollBody)
				if preparerOverlapsRoll(l) {
					overlaps++
				}
				if got := end(); got != rollBody+headerSize {
					t.Fatalf("cycle %d: the record that rolled ends at %d in its segment", cycles, got)
				}
				for _, off := range []uint64{big, roller} {
					if err := checkPatternRecord(l, off, sizes[off]); err != nil {
						t.Fatalf("cycle %d: %v", cycles, err)
					}
				}
				switch m.action {
				case "close-after-roll":
					closeLeavesNothing(t, l, fmt.Sprintf("cycle %d", cycles))
					l = mustOpen(t, dir, opts)
				case "truncate":
					// Cut the big record too: the segment just taken is
					// dropped while the preparer may still hold it, and
					// the one before becomes active below half again.
					if err := l.Truncate(big); err != nil {
						t.Fatalf("cycle %d: Truncate(%d): %v", cycles, big, err)
					}
					delete(sizes, big)
					delete(sizes, roller)
				case "drop":
					if _, err := l.DropBefore(roller); err != nil {
						t.Fatalf("cycle %d: DropBefore(%d): %v", cycles, roller, err)
					}
					for off := range sizes {
						if off < l.First() {
							delete(sizes, off)
						}
					}
				}
				recycled = max(recycled, l.Stats().Recycled)
			}
			for off, n := range sizes {
				if err := checkPatternRecord(l, off, n); err != nil {
					t.Fatal(err)
				}
			}
			if got := uint64(len(sizes)) + skipped; got != l.Next()-l.First() {
				t.Fatalf("%d records and %d skipped offsets expected in [%d, %d)", len(sizes), skipped, l.First(), l.Next())
			}
			verify := func(what string) {
				t.Helper()
				rep, err := l.Verify(nil)
				if err != nil || rep.Damaged > 0 || rep.Missing != skipped || len(rep.IndexProblems) > 0 ||
					skipped == 0 && len(rep.Problems) > 0 {
					t.Fatalf("%s: Verify: %v; damaged %d, missing %d (%d skipped), problems %q, index problems %q",
						what, err, rep.Damaged, rep.Missing, skipped, rep.Problems, rep.IndexProblems)
				}
			}
			verify("at the end")
			if m.spare > 0 && recycled == 0 && l.Stats().Recycled == 0 {
				t.Errorf("no segment was made from a dropped file")
			}
			closeLeavesNothing(t, l, "at the end")
			l = mustOpen(t, dir, opts)
			for off, n := range sizes {
				if err := checkPatternRecord(l, off, n); err != nil {
					t.Fatalf("after the reopen: %v", err)
				}
			}
			verify("after the reopen")
			t.Logf("%d cycles, %d rolls after which the preparer was still faulting in the segment taken", cycles, overlaps)
			if faulting && overlaps == 0 {
				t.Errorf("in %d cycles no roll took a segment still being faulted in: the test misses its window", cycles)
			}
		})
	}
}

// Rolls all the time: segments of 1 byte (every record its own segment),
// 4 KiB (some records larger than a segment) and 64 KiB, under each sync
// policy, with and without reuse of dropped files. One goroutine appends
// (Append and AppendBatch, now and then a Truncate of the last few
// records), two read acknowledged records as they come, one drops the
// oldest segments. A read gives the record's body or, for an offset just
// dropped or cut, an error matching ErrNotFound; never another error,
// never other bytes. At the end every record reads back, Verify is
// healthy, Close leaves no prepared or recycled file, and a reopen finds a
// clean log with the same records.
func TestPreparedRollStorm(t *testing.T) {
	type config struct {
		seg    int64
		sync   SyncPolicy
		spare  int
		retire bool // Options.RetireMappings
		retain bool // RetentionBytes of four segments (or 64 KiB), RetentionAge of 20 ms
	}
	// Every policy and reuse with 64 KiB segments; the costlier tiny ones
	// with a few of them (all of them with -prepared.rounds above 1).
	tiny := map[config]bool{
		{1, SyncNone, 0, false, false}: true, {1, SyncInterval, 2, false, false}: true, {1, SyncAlways, 0, false, false}: true,
		{4 << 10, SyncNone, 2, false, false}: true, {4 << 10, SyncInterval, 0, false, false}: true, {4 << 10, SyncAlways, 0, false, false}: true,
	}
	var cs []config
	for _, seg := range []int64{1, 4 << 10, 64 << 10} {
		for _, p := range []SyncPolicy{SyncNone, SyncInterval, SyncAlways} {
			for _, spare := range []int{0, 2} {
				c := config{seg: seg, sync: p, spare: spare}
				if p == SyncAlways && spare > 0 { // SyncAlways reuses nothing
					continue
				}
				if seg == 64<<10 || *preparedRounds > 1 || tiny[c] {
					cs = append(cs, c)
				}
			}
		}
	}
	cs = append(cs, config{64 << 10, SyncNone, 1, true, true}, config{64 << 10, SyncInterval, 2, true, false},
		config{4 << 10, SyncInterval, 2, false, true}, config{4 << 10, SyncNone, 0, true, true})
	// Whether a roll finds a dropped file kept depends on when the dropper
	// runs against the rolls: on a loaded machine one configuration may
	// reuse none (0 of 6-8 drops, seen once). The storm as a whole must.
	var recycling, recycled int
	defer func() {
		if recycling > 0 && recycled == 0 {
			t.Errorf("no segment was made from a dropped file in any of %d storms with RecycleSegments", recycling)
		}
	}()
	for _, c := range cs {
		t.Run(fmt.Sprintf("seg%d-%s-spare%d-retire%v-retain%v", c.seg, c.sync, c.spare, c.retire, c.retain), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: c.seg, Sync: c.sync, SyncInterval: time.Millisecond,
				RecycleSegments: c.spare, IndexIntervalBytes: 256, RetireMappings: c.retire}
			if c.retain {
				opts.RetentionBytes = max(4*c.seg, 64<<10)
				opts.RetentionAge = 20 * time.Millisecond
			}
			l := mustOpen(t, dir, opts)
			// A roll of 1-byte segments costs about 2 ms here (three files
			// made, mapped, sealed), one of 4 KiB segments every few records.
			records := map[int64]int{1: 300, 4 << 10: 800, 64 << 10: 1500}[c.seg] * *preparedRounds
			if c.sync == SyncAlways {
				records /= 4
			}
			var (
				acked   atomic.Uint64 // every offset below it was acknowledged
				stop    = make(chan struct{})
				wg      sync.WaitGroup
				mu      sync.Mutex
				fails   []string
				reads   atomic.Int64
				drops   atomic.Int64
				missing atomic.Int64
			)
			var failing atomic.Bool
			fail := func(format string, args ...any) {
				mu.Lock()
				fails = append(fails, fmt.Sprintf(format, args...))
				mu.Unlock()
				failing.Store(true)
			}
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(r), 99))
					for i := 0; ; i++ {
						if i%64 == 63 {
							time.Sleep(20 * time.Microsecond) // leave the writer a core
						}
						select {
						case <-stop:
							return
						default:
						}
						hi := acked.Load()
						if hi == 0 {
							runtime.Gosched()
							continue
						}
						off := hi - 1 - uint64(rng.IntN(int(min(hi, 64))))
						err := checkPatternRecord(l, off, mixedSize(off))
						switch {
						case err == nil:
							reads.Add(1)
						case errors.Is(err, ErrNotFound):
							missing.Add(1) // dropped, or cut by a Truncate meanwhile
						default:
							fail("reader %d: %v", r, err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					if hi := acked.Load(); hi > 200 {
						n, err := l.DropBefore(hi - 200)
						if err != nil {
							fail("DropBefore(%d): %v", hi-200, err)
							return
						}
						drops.Add(int64(n))
					}
				}
			}()
			rng := rand.New(rand.NewPCG(uint64(c.seg), uint64(c.sync)))
			truncates := 0
			for l.Next() < uint64(records) && !failing.Load() {
				next := l.Next()
				switch k := rng.IntN(20); {
				case k < 2:
					n := 1 + rng.IntN(8)
					bodies := make([][]byte, n)
					for i := range bodies {
						bodies[i] = patternBody(next+uint64(i), mixedSize(next+uint64(i)))
					}
					first, got, err := l.AppendBatch(bodies, nil)
					if err != nil || first != next || got != n {
						t.Fatalf("AppendBatch of %d at %d: first %d, %d written, %v", n, next, first, got, err)
					}
				case k == 2 && next%3 == 0 && next > l.First()+10:
					cut := next - uint64(1+rng.IntN(5))
					acked.Store(cut)
					if err := l.Truncate(cut); err != nil {
						t.Fatalf("Truncate(%d): %v", cut, err)
					}
					truncates++
					continue
				default:
					off, err := l.Append(patternBody(next, mixedSize(next)))
					if err != nil || off != next {
						t.Fatalf("Append at %d: %d, %v", next, off, err)
					}
				}
				acked.Store(l.Next())
			}
			close(stop)
			wg.Wait()
			if len(fails) > 0 {
				t.Fatalf("%d failures, first: %s", len(fails), fails[0])
			}
			st := l.Stats()
			checkAllPatternRecords(t, l, "before Close")
			closeLeavesNothing(t, l, "Close")
			l = mustOpen(t, dir, opts)
			if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 || rec.IndexesRebuilt > 0 {
				t.Fatalf("the reopen after Close: %+v", rec)
			}
			// Retention may drop more before Close, never less.
			if l.Next() != st.Next || l.First() < st.First || !c.retain && l.First() != st.First {
				t.Fatalf("reopened at [%d, %d), closed at [%d, %d)", l.First(), l.Next(), st.First, st.Next)
			}
			checkAllPatternRecords(t, l, "after the reopen")
			if c.spare > 0 {
				recycling++
				recycled += int(st.Recycled)
			}
			if reads.Load() == 0 {
				t.Errorf("the readers read nothing")
			}
			t.Logf("%d records, %d truncates, %d segments dropped, %d made from dropped files, %d reads (%d of offsets gone)",
				st.Next, truncates, drops.Load(), st.Recycled, reads.Load(), missing.Load())
		})
	}
}

// Close while appenders roll tiny segments and the preparer prepares and
// faults in, over and over: Close returns nil, the appenders get nil or
// ErrClosed, no prepared or recycled file is left, no goroutine outlives
// the logs, and each reopen finds a clean log holding every acknowledged
// record (above what was dropped) with its body.
func TestPreparedCloseRacingRolls(t *testing.T) {
	dir := t.TempDir()
	before := runtime.NumGoroutine()
	rng := rand.New(rand.NewPCG(3, 5))
	acked := map[uint64][]byte{}
	cycles := 60 * *preparedRounds
	segs := []int64{1, 4 << 10, 64 << 10, 1 << 20}
	policies := []SyncPolicy{SyncNone, SyncInterval, SyncAlways}
	for cycle := range cycles {
		opts := Options{SegmentBytes: segs[cycle%len(segs)], Sync: policies[cycle/len(segs)%len(policies)],
			SyncInterval: time.Millisecond}
		if opts.Sync != SyncAlways && cycle%2 == 1 {
			opts.RecycleSegments = 1 + cycle%3
		}
		l, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("cycle %d: Open: %v", cycle, err)
		}
		if rec := l.Recovery(); cycle > 0 && (!rec.Clean || len(rec.Notes) > 0) {
			t.Fatalf("cycle %d: the reopen after Close found %+v", cycle, rec)
		}
		for off := l.First(); off < l.Next(); off++ {
			want, ok := acked[off]
			if !ok {
				t.Fatalf("cycle %d: offset %d is in the log but was never acknowledged", cycle, off)
			}
			r, err := l.Read(off)
			if err != nil {
				t.Fatalf("cycle %d: Read(%d): %v", cycle, off, err)
			}
			if !bytes.Equal(r.Body, want) {
				t.Fatalf("cycle %d: Read(%d): %d bytes, not the %d acknowledged", cycle, off, len(r.Body), len(want))
			}
			r.Release()
		}
		for off := range acked {
			if off < l.First() {
				delete(acked, off)
			} else if off >= l.Next() {
				t.Fatalf("cycle %d: acknowledged offset %d lost: the log ends at %d", cycle, off, l.Next())
			}
		}
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			bad []string
		)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := uint64(0); ; seq++ {
					body := taggedBody(byte(w), uint64(cycle)<<32|seq)
					var off uint64
					var err error
					if seq%5 == 4 {
						bodies := [][]byte{body, taggedBody(byte(w), uint64(cycle)<<32|seq|1<<31)}
						var n int
						off, n, err = l.AppendBatch(bodies, nil)
						mu.Lock()
						for i := range n {
							acked[off+uint64(i)] = bodies[i]
						}
						mu.Unlock()
					} else if off, err = l.Append(body); err == nil {
						mu.Lock()
						acked[off] = body
						mu.Unlock()
					}
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							mu.Lock()
							bad = append(bad, fmt.Sprintf("writer %d: %v", w, err))
							mu.Unlock()
						}
						return
					}
				}
			}()
		}
		if opts.RecycleSegments > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					time.Sleep(200 * time.Microsecond)
					_, err := l.DropBefore(l.Next() - min(l.Next(), 50))
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("DropBefore: %v", err))
						mu.Unlock()
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		if err := l.Close(); err != nil {
			t.Fatalf("cycle %d (%+v): Close: %v", cycle, opts, err)
		}
		wg.Wait()
		if len(bad) > 0 {
			t.Fatalf("cycle %d (%+v): %v", cycle, opts, bad)
		}
		if left := closedLeftovers(dir); len(left) > 0 {
			t.Fatalf("cycle %d (%+v): Close left %v", cycle, opts, left)
		}
	}
	for deadline := time.Now().Add(time.Minute); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after the cycles:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
	l := mustOpen(t, dir, Options{})
	verifyHealthy(t, l, "after the cycles")
	t.Logf("%d cycles, %d records at the end", cycles, l.Next()-l.First())
}

// A full disk at the preparation. "prepared-growth": every allocation of
// the prepared .log file past its first step fails, so that Preallocate
// fails and the segment is offered with one step: the writer grows it
// itself once it is named, and no append fails. "prepared-all": every
// allocation of a prepared file fails, so Prepare fails and each roll
// creates its segment: no append fails either. "random": any allocation of
// a .log file fails one time in a few, prepared or not, at the first step,
// at Preallocate or at the writer's growth: an append then fails with
// ENOSPC and writes nothing (Next does not move; a batch keeps what it
// reports), and is retried. After each: every record reads back, Verify
// is healthy, Close reports nothing and leaves no prepared file.
func TestPreparedFullDisk(t *testing.T) {
	for _, c := range []struct {
		name string
		seg  int64
		body int
		sync SyncPolicy
	}{
		{"prepared-growth", 32 << 20, 3 << 20, SyncNone},
		{"prepared-growth-interval", 32 << 20, 3 << 20, SyncInterval},
		{"prepared-all", 64 << 10, 0, SyncNone},
		{"prepared-all-always", 4 << 10, 0, SyncAlways},
		{"random", 64 << 10, 0, SyncNone},
		{"random-interval", 4 << 10, 0, SyncInterval},
		{"random-big", 32 << 20, 3 << 20, SyncNone},
		{"random-always", 4 << 10, 0, SyncAlways},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// Allocations of the prepared .log file: its first step, and
			// Preallocate's when the first eighth is past it. No chunk of
			// the fault-in may allocate (grow the file).
			var refused, calls, preparedLog, preparedFirst atomic.Int64
			var full atomic.Bool
			var rmu sync.Mutex
			rng := rand.New(rand.NewPCG(uint64(c.seg), 1))
			step := min(int64(2<<20), max((c.seg/8+4095)/4096*4096, 4096))
			opts := Options{SegmentBytes: c.seg, Sync: c.sync, SyncInterval: time.Millisecond, MaxRecordBytes: c.body + 16<<10}
			opts.allocate = func(f *os.File, off, n int64) error {
				calls.Add(1)
				name := filepath.Base(f.Name())
				prepared := strings.HasPrefix(name, segment.PreparedPrefix)
				if prepared && strings.HasSuffix(name, segment.LogSuffix) {
					preparedLog.Add(1)
					if off == 0 {
						preparedFirst.Add(1)
					}
				}
				deny := false
				if full.Load() {
					switch {
					case strings.HasPrefix(c.name, "prepared-growth"):
						deny = prepared && strings.HasSuffix(name, segment.LogSuffix) && off+n > step
					case strings.HasPrefix(c.name, "prepared-all"):
						deny = prepared
					default:
						rmu.Lock()
						deny = strings.HasSuffix(name, segment.LogSuffix) && rng.IntN(4) == 0
						rmu.Unlock()
					}
				}
				if deny {
					refused.Add(1)
					return syscall.ENOSPC
				}
				return mmapfile.Allocate(f, off, n)
			}
			l := mustOpen(t, dir, opts)
			full.Store(true)
			mayFail := strings.HasPrefix(c.name, "random")
			size := func(off uint64) int {
				if c.body > 0 {
					return c.body + int(off%7)*1000
				}
				return mixedSize(off)
			}
			// The bodies of a batch, the i-th: in mappings of their own
			// when large.
			var big [3][]byte
			if c.body > 0 {
				for i := range big {
					big[i] = scratchMapping(t, c.body+8000)
				}
			}
			body := func(i int, off uint64) []byte {
				if c.body == 0 {
					return patternBody(off, size(off))
				}
				b := big[i][:size(off)]
				fillPatternBody(b, off)
				return b
			}
			sizes := map[uint64]int{}
			records := 400 * *preparedRounds
			if c.body > 0 {
				records = 60 * *preparedRounds
			} else if c.sync == SyncAlways {
				records = 150 * *preparedRounds
			}
			failed := 0
			// Past the records asked for until an allocation was refused: the
			// preparer may not have run yet on a busy machine.
			for l.Next() < uint64(records) || refused.Load() == 0 && l.Next() < uint64(50*records) {
				next := l.Next()
				var err error
				if next%9 == 4 {
					bodies := [][]byte{body(0, next), body(1, next+1), body(2, next+2)}
					var first uint64
					var n int
					first, n, err = l.AppendBatch(bodies, nil)
					if first != next && (n > 0 || err == nil) {
						t.Fatalf("AppendBatch at %d: first %d", next, first)
					}
					// AppendBatch reports n = 0 today when a record after
					// the first of a batch meets the full disk once earlier
					// ones are written: the records written are taken from
					// Next, each checked against the body given.
					if l.Next() < next+uint64(n) || l.Next() > next+3 {
						t.Fatalf("AppendBatch at %d reported %d written, %v; Next is %d", next, n, err, l.Next())
					}
					for i := range int(l.Next() - next) {
						sizes[next+uint64(i)] = len(bodies[i])
					}
				} else {
					var off uint64
					b := body(0, next)
					if off, err = l.Append(b); err == nil {
						if off != next {
							t.Fatalf("Append at %d got offset %d", next, off)
						}
						sizes[off] = len(b)
					} else if l.Next() != next {
						t.Fatalf("a failed Append (%v) moved Next from %d to %d", err, next, l.Next())
					}
				}
				if err != nil {
					if !mayFail || !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("append at %d with %d allocations refused: %v", next, refused.Load(), err)
					}
					failed++
					if failed > 20*records {
						t.Fatalf("%d appends failed in a row or so: the log does not recover from ENOSPC", failed)
					}
				}
			}
			full.Store(false)
			if strings.HasPrefix(c.name, "prepared-growth") {
				// The preparer may be between the newest prepared file's
				// first step and its Preallocate as the appends end (7 of
				// 8 once, in a loaded run): wait for it, and for no more.
				for deadline := time.Now().Add(time.Minute); preparedLog.Load() != 2*preparedFirst.Load(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d allocations of the prepared .log file for %d prepared segments: want its first step and Preallocate's",
							preparedLog.Load(), preparedFirst.Load())
					}
				}
			}
			if refused.Load() == 0 {
				t.Fatalf("no allocation was refused in %d calls: the hook is not reached", calls.Load())
			}
			for off, n := range sizes {
				if err := checkPatternRecord(l, off, n); err != nil {
					t.Fatal(err)
				}
			}
			verifyHealthy(t, l, "with the disk full")
			closeLeavesNothing(t, l, "Close")
			l = mustOpen(t, dir, opts)
			for off, n := range sizes {
				if err := checkPatternRecord(l, off, n); err != nil {
					t.Fatalf("after the reopen: %v", err)
				}
			}
			if uint64(len(sizes)) != l.Next() {
				t.Fatalf("%d records acknowledged, the log holds %d", len(sizes), l.Next())
			}
			verifyHealthy(t, l, "after the reopen")
			t.Logf("%d records, %d allocations refused of %d, %d appends failed", l.Next(), refused.Load(), calls.Load(), failed)
		})
	}
}

// A hand in the directory while a prepared segment is being
// faulted in: its files removed ("removed"), its .log replaced by another
// file ("replaced"), or a file put where the next segment goes
// ("blocked"). The roll's Activate then fails beside the preparer's chunk
// and the roll drops the prepared segment: removed or replaced, the roll
// creates its segment and the append succeeds; blocked, the append fails
// with nothing written, and succeeds once the file is gone. Either way no
// prepared file is left, every record reads back, Verify is healthy, and
// Close and a reopen find a clean log.
func TestPreparedTamperedFiles(t *testing.T) {
	const segBytes = 16 << 20
	dir := t.TempDir()
	opts := Options{SegmentBytes: segBytes, MaxRecordBytes: segBytes}
	l := mustOpen(t, dir, opts)
	scratch := scratchMapping(t, segBytes)
	sizes := map[uint64]int{}
	add := func(n int) (uint64, error) {
		want := l.Next()
		body := scratch[:n]
		fillPatternBody(body, want)
		off, err := l.Append(body)
		if err == nil {
			if off != want {
				t.Fatalf("Append at %d got offset %d", want, off)
			}
			sizes[off] = n
		} else if l.Next() != want {
			t.Fatalf("a failed Append (%v) moved Next from %d to %d", err, want, l.Next())
		}
		return off, err
	}
	prepared := func(suffix string) string { return filepath.Join(dir, segment.PreparedPrefix+suffix) }
	kinds := []string{"removed", "replaced", "blocked"}
	for cycle := range 3 * len(kinds) * *preparedRounds {
		kind := kinds[cycle%len(kinds)]
		what := fmt.Sprintf("cycle %d (%s)", cycle, kind)
		l.mu.Lock()
		e := l.active.End()
		l.mu.Unlock()
		if _, err := add(int(segBytes - e - 4096 - headerSize)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		waitPreparedOffered(t, l)
		next := l.Next()
		blocker := filepath.Join(dir, segment.Name(next, segment.LogSuffix))
		switch kind {
		case "removed":
			for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
				if err := os.Remove(prepared(suffix)); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
		case "replaced":
			if err := os.Remove(prepared(segment.LogSuffix)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(prepared(segment.LogSuffix), make([]byte, 8192), 0o600); err != nil {
				t.Fatal(err)
			}
		case "blocked":
			if err := os.WriteFile(blocker, make([]byte, 8192), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := add(8 << 10)
		if kind == "blocked" {
			if err == nil {
				t.Fatalf("%s: an append rolled onto a segment file that was there already", what)
			}
			if cycle < len(kinds) {
				t.Logf("%s: the append that rolls: %v", what, err)
			}
			if err := os.Remove(blocker); err != nil {
				t.Fatal(err)
			}
			_, err = add(8 << 10)
		}
		if err != nil {
			t.Fatalf("%s: Append that rolls: %v", what, err)
		}
		if left := closedLeftovers(dir); len(left) > 0 {
			t.Fatalf("%s: the failed activation left %v", what, left)
		}
		for off, n := range sizes {
			if off+2 >= l.Next() {
				if err := checkPatternRecord(l, off, n); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
		}
	}
	for off, n := range sizes {
		if err := checkPatternRecord(l, off, n); err != nil {
			t.Fatal(err)
		}
	}
	if uint64(len(sizes)) != l.Next() {
		t.Fatalf("%d records acknowledged, the log holds %d", len(sizes), l.Next())
	}
	verifyHealthy(t, l, "after the tampering")
	closeLeavesNothing(t, l, "Close")
	l = mustOpen(t, dir, opts)
	if rec := l.Recovery(); !rec.Clean || len(rec.Notes) > 0 {
		t.Fatalf("the reopen after Close found %+v", rec)
	}
	for off, n := range sizes {
		if err := checkPatternRecord(l, off, n); err != nil {
			t.Fatalf("after the reopen: %v", err)
		}
	}
	verifyHealthy(t, l, "after the reopen")
}

// The child processes of TestPreparedKilledWriterReopens and
// TestPreparedFollowersInOtherProcesses, in their environment.
const (
	preparedEnvRole   = "PAGELOG_PREPARED_ROLE"
	preparedEnvDir    = "PAGELOG_PREPARED_DIR"
	preparedEnvSeg    = "PAGELOG_PREPARED_SEG"
	preparedEnvSync   = "PAGELOG_PREPARED_SYNC"
	preparedEnvSpare  = "PAGELOG_PREPARED_SPARE"
	preparedEnvTarget = "PAGELOG_PREPARED_TARGET"
)

// preparedChildOptions are the options of a writer child.
func preparedChildOptions(seg int64, p SyncPolicy, spare int) Options {
	return Options{SegmentBytes: seg, Sync: p, SyncInterval: time.Millisecond, RecycleSegments: spare, IndexIntervalBytes: 512}
}

// TestPreparedChild is the body of the child processes: a writer
// that appends records of patternBody (and drops the oldest segments now and
// then) until it is killed, printing each acknowledged offset; or a
// follower that reads the log read-only up to a target and checks every
// record.
func TestPreparedChild(t *testing.T) {
	role := os.Getenv(preparedEnvRole)
	if role == "" {
		return // run as a child only
	}
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stdout, "E "+format+"\n", args...)
		os.Exit(2)
	}
	dir := os.Getenv(preparedEnvDir)
	switch role {
	case "writer":
		seg, _ := strconv.ParseInt(os.Getenv(preparedEnvSeg), 10, 64)
		spare, _ := strconv.Atoi(os.Getenv(preparedEnvSpare))
		p, err := ParseSyncPolicy(os.Getenv(preparedEnvSync))
		if err != nil {
			die("%v", err)
		}
		l, err := Open(dir, preparedChildOptions(seg, p, spare))
		if err != nil {
			die("Open: %v", err)
		}
		out := bufio.NewWriterSize(os.Stdout, 64)
		fmt.Fprintf(out, "O %d\n", l.Next())
		out.Flush()
		for i := 0; ; i++ {
			next := l.Next()
			if i%7 == 3 {
				bodies := [][]byte{patternBody(next, patternSizeIn(seg, next)), patternBody(next+1, patternSizeIn(seg, next+1))}
				if first, n, err := l.AppendBatch(bodies, nil); err != nil || first != next || n != 2 {
					die("AppendBatch at %d: %d, %d, %v", next, first, n, err)
				}
				fmt.Fprintf(out, "A %d\n", next+1)
			} else {
				if off, err := l.Append(patternBody(next, patternSizeIn(seg, next))); err != nil || off != next {
					die("Append at %d: %d, %v", next, off, err)
				}
				fmt.Fprintf(out, "A %d\n", next)
			}
			out.Flush()
			if i%50 == 49 && next > 100 {
				if _, err := l.DropBefore(next - 100); err != nil {
					die("DropBefore: %v", err)
				}
			}
		}
	case "follower":
		target, _ := strconv.ParseUint(os.Getenv(preparedEnvTarget), 10, 64)
		l, err := OpenReadOnly(dir, Options{})
		if err != nil {
			die("OpenReadOnly: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for off := uint64(0); off < target; {
			rec, next, err := l.ReadNext(ctx, off)
			if err != nil {
				die("ReadNext(%d): %v", off, err)
			}
			if next != off+1 || rec.Offset != off || !matchesPatternBody(rec.Body, off, mixedSize(off)) {
				die("ReadNext(%d): offset %d, next %d, %d bytes; want the %d bytes written", off, rec.Offset, next, len(rec.Body), mixedSize(off))
			}
			rec.Release()
			off = next
		}
		rep, err := l.Verify(nil)
		if err != nil || !rep.Healthy() {
			die("Verify beside the writer: %v; damaged %d, missing %d, problems %q, index problems %q",
				err, rep.Damaged, rep.Missing, rep.Problems, rep.IndexProblems)
		}
		if err := l.Close(); err != nil {
			die("Close: %v", err)
		}
		fmt.Fprintf(os.Stdout, "R %d\n", target)
		os.Exit(0)
	}
	die("unknown role %q", role)
}

// startPreparedChild starts a child of role with env; its stdout lines come on
// the channel returned, closed when it ends.
func startPreparedChild(t *testing.T, role string, env ...string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	t.Helper()
	cmd := testkit.Child("TestPreparedChild")
	cmd.Env = append(append(os.Environ(), preparedEnvRole+"="+role), env...)
	out, stderr := testkit.StartChild(t, cmd)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, testkit.Lines(out, 1024), stderr
}

// Kill -9 a process that rolls segments (1 byte, 4 KiB and 64 KiB; 16 MiB
// of larger records, whose prepared segments take the preparer a while to
// fault in) under each sync policy, with reuse of dropped files, at a
// random moment (seeded: -crash.seed replays the plan): often
// while a prepared segment exists, is being faulted in, or is being
// activated. The page cache survives the kill, so the next writable Open
// must find every acknowledged record with its body (and every record the
// child wrote past them), remove the prepared files before anything is
// appended, report no damage, and Verify healthy; Close then leaves no
// prepared or recycled file.
func TestPreparedKilledWriterReopens(t *testing.T) {
	seed := crashSeedFor(t)
	rng := rand.New(rand.NewPCG(seed, 17))
	rounds := 6 * *preparedRounds
	killedWithPrepared := 0
	// 16 MiB: the preparer faults in 2 MiB of each prepared segment, and
	// the kill often lands in it.
	for _, seg := range []int64{1, 4 << 10, 64 << 10, 16 << 20} {
		t.Run(fmt.Sprintf("seg%d", seg), func(t *testing.T) {
			dir := t.TempDir()
			for round := range rounds {
				p := []SyncPolicy{SyncNone, SyncInterval, SyncAlways}[round%3]
				spare := 0
				if p != SyncAlways {
					spare = round % 3
				}
				delay := time.Duration(2000+rng.IntN(60_000)) * time.Microsecond
				cmd, lines, stderr := startPreparedChild(t, "writer", preparedEnvDir+"="+dir, preparedEnvSeg+"="+strconv.FormatInt(seg, 10),
					preparedEnvSync+"="+p.String(), preparedEnvSpare+"="+strconv.Itoa(spare))
				what := fmt.Sprintf("round %d (%s, spare %d, kill %v after open, seed %d)", round, p, spare, delay, seed)
				var last int64 = -1
				var timer <-chan time.Time
				hang := time.After(time.Minute)
				killed := false
			read:
				for {
					select {
					case line, ok := <-lines:
						if !ok {
							break read
						}
						f := strings.Fields(line)
						switch {
						case len(f) == 2 && f[0] == "O":
							timer = time.After(delay)
						case len(f) == 2 && f[0] == "A":
							n, _ := strconv.ParseInt(f[1], 10, 64)
							last = n
						case len(f) > 0 && f[0] == "E":
							t.Fatalf("%s: the child failed: %s\n%s", what, line, stderr)
						}
					case <-timer:
						timer = nil
						killed = true
						_ = cmd.Process.Signal(syscall.SIGKILL)
					case <-hang:
						t.Fatalf("%s: the child hung\n%s", what, stderr)
					}
				}
				_ = cmd.Wait()
				if !killed {
					t.Fatalf("%s: the child ended before the kill\n%s", what, stderr)
				}
				if _, err := os.Stat(filepath.Join(dir, segment.PreparedPrefix+segment.LogSuffix)); err == nil {
					killedWithPrepared++
				}
				l, err := Open(dir, preparedChildOptions(seg, p, spare))
				if err != nil {
					t.Fatalf("%s: Open after the kill: %v", what, err)
				}
				if left := closedLeftovers(dir); len(left) > 0 {
					t.Fatalf("%s: the open after the kill left %v", what, left)
				}
				rec := l.Recovery()
				if len(rec.Active.Damaged) > 0 {
					t.Fatalf("%s: recovery reports damage after a kill: %+v", what, rec.Active)
				}
				if last >= 0 && (l.Next() <= uint64(last) || l.First() > uint64(last)) {
					t.Fatalf("%s: the log holds [%d, %d); offset %d was acknowledged", what, l.First(), l.Next(), last)
				}
				checkAllPatternRecords(t, l, what)
				closeLeavesNothing(t, l, what)
			}
		})
	}
	t.Logf("seed %d: %d kills left a prepared segment behind", seed, killedWithPrepared)
}

// Read-only followers in other processes read every record while the
// writer rolls tiny segments (taking prepared segments, faulted in or
// not) and closes and reopens now and then (Close drops the prepared
// segment): each follower gets every record in order with its body, and
// its Verify beside the writer finds no damage.
func TestPreparedFollowersInOtherProcesses(t *testing.T) {
	for _, seg := range []int64{1, 4 << 10, 64 << 10} {
		t.Run(fmt.Sprintf("seg%d", seg), func(t *testing.T) {
			dir := t.TempDir()
			opts := preparedChildOptions(seg, SyncNone, 0)
			l, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			target := uint64(map[int64]int{1: 300, 4 << 10: 800, 64 << 10: 2000}[seg] * *preparedRounds)
			type child struct {
				cmd    *exec.Cmd
				lines  <-chan string
				stderr *bytes.Buffer
			}
			var kids []child
			for range 2 {
				cmd, lines, stderr := startPreparedChild(t, "follower", preparedEnvDir+"="+dir, preparedEnvTarget+"="+strconv.FormatUint(target, 10))
				kids = append(kids, child{cmd, lines, stderr})
			}
			for l.Next() < target {
				next := l.Next()
				if next%300 == 299 {
					closeLeavesNothing(t, l, fmt.Sprintf("Close at %d", next))
					if l, err = Open(dir, opts); err != nil {
						t.Fatal(err)
					}
				}
				n := min(1+int(next%3), int(target-next))
				bodies := make([][]byte, n)
				for i := range bodies {
					bodies[i] = patternBody(next+uint64(i), mixedSize(next+uint64(i)))
				}
				if first, got, err := l.AppendBatch(bodies, nil); err != nil || first != next || got != n {
					t.Fatalf("AppendBatch at %d: %d, %d, %v", next, first, got, err)
				}
				if next%64 == 0 {
					time.Sleep(100 * time.Microsecond) // let the followers catch up now and then
				}
			}
			for i, k := range kids {
				var got []string
				for line := range k.lines {
					got = append(got, line)
				}
				if err := k.cmd.Wait(); err != nil || len(got) != 1 || got[0] != fmt.Sprintf("R %d", target) {
					t.Fatalf("follower %d: %v, said %q\n%s", i, err, got, k.stderr)
				}
			}
			checkAllPatternRecords(t, l, "the writer")
			closeLeavesNothing(t, l, "Close")
		})
	}
}
