package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

func releaseChurnConfigs() []churnCase {
	with := func(seg int64, f func(o *Options)) Options {
		o := Options{SegmentBytes: seg}
		f(&o)
		return o
	}
	return []churnCase{
		{"none-recycle1", with(4<<10, func(o *Options) { o.RecycleSegments = 1 }), true, true},
		{"none-recycle3-256k", with(256<<10, func(o *Options) { o.RecycleSegments = 3 }), true, true},
		{"interval-recycle1-max1", with(16<<10, func(o *Options) {
			o.RecycleSegments = 1
			o.MaxMappedSegments = 1
			o.Sync, o.SyncInterval = SyncInterval, time.Millisecond
		}), true, true},
		{"always", with(16<<10, func(o *Options) { o.RecycleSegments = 2; o.Sync = SyncAlways }), true, true},
		{"interval-retention-recycle2", with(16<<10, func(o *Options) {
			o.RecycleSegments = 2
			o.Sync, o.SyncInterval = SyncInterval, 2*time.Millisecond
			o.RetentionBytes = 200 << 10
		}), false, false},
	}
}

// dirFilesMatching lists the names of dir that match pattern.
func dirFilesMatching(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// TestReleaseSparesBesideChurn: ReleaseSpares in a loop beside a writer
// that rolls (and cuts), a dropper (with reuse), retention, syncs, and
// readers that hold records of segments being dropped and check their
// bytes again before letting them go. No read gives damage or another
// record's bytes, no held record changes, the preparer prepares again
// once the releases stop, Close leaves no spare file, descriptor or
// mapping behind, and the log reopens whole.
func TestReleaseSparesBesideChurn(t *testing.T) {
	for _, c := range releaseChurnConfigs() {
		t.Run(c.name, func(t *testing.T) {
			releaseSparesChurn(t, c, 15*time.Second)
		})
	}
}

func releaseSparesChurn(t *testing.T, c churnCase, d time.Duration) {
	dir := t.TempDir()
	l := mustOpen(t, dir, c.opts)
	var (
		stopRelease atomic.Bool
		relWG       sync.WaitGroup
		released    atomic.Int64
	)
	body, valid := generationBody, checkGenerationBody
	if c.opts.SegmentBytes > 64<<10 {
		// Bigger records: the 256 KiB segments roll too.
		body, valid = paddedGenerationBody(2000)
	}
	cfg := churnConfig{
		seed:  9,
		body:  body,
		check: valid,
		batch: 20,
		// Readers holding records, oldest segments first: they are the
		// ones dropped and reused.
		readers: churnReaders{n: 2, span: 40, hold: 4, releaseOneIn: 3, pause: 300 * time.Microsecond},
		syncer:  true,
	}
	if c.truncate {
		cfg.truncateOneIn, cfg.truncateMax = 25, 60
	}
	if c.drop {
		cfg.drop = func(l *Log) (int, error) {
			segs := *l.segs.Load()
			if len(segs) < 5 {
				return 0, nil
			}
			n, err := l.DropBefore(segs[len(segs)-4].Base())
			if err != nil {
				return 0, fmt.Errorf("DropBefore: %w", err)
			}
			return n, nil
		}
	}
	h := startChurn(l, cfg)
	// The releaser: at random moments, often in bursts.
	h.goRun(&relWG, 4, func(rng *rand.Rand) {
		for !h.stopped() && !stopRelease.Load() {
			released.Add(int64(l.ReleaseSpares()))
			if rng.IntN(4) == 0 {
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
			}
		}
	})
	h.waitUntil(time.Second, d, func() bool { return h.rolled.Load() >= 150 })
	stopRelease.Store(true)
	relWG.Wait()
	if err := h.err(); err != nil {
		_ = h.end()
		t.Fatal(err)
	}
	// The releases stop: the preparer prepares the next segments again
	// while the writer goes on (a prepared segment shows, and a roll
	// takes one: its file was the prepared one).
	preparedSeen := false
	for deadline := time.Now().Add(time.Minute); !preparedSeen; time.Sleep(time.Millisecond) {
		if err := h.err(); err != nil {
			break
		}
		if len(dirFilesMatching(t, dir, "prepared.log")) > 0 {
			preparedSeen = true
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if err := h.end(); err != nil {
		t.Fatal(err)
	}
	if !preparedSeen {
		t.Errorf("no segment prepared in a minute of appends after the releases stopped (%d rolled, %d files released)", h.rolled.Load(), released.Load())
	}
	awaitBackgroundSeal(l)
	st := l.Stats()
	t.Logf("%d records, %d segments (%d rolled), %d cuts, %d reads, %d spare files released, %d segments made from kept files",
		l.Next(), st.Segments, h.rolled.Load(), h.cuts.Load(), h.reads.Load(), released.Load(), st.Recycled)
	if h.rolled.Load() < 40 {
		t.Errorf("only %d segments rolled", h.rolled.Load())
	}
	if released.Load() == 0 {
		t.Errorf("ReleaseSpares never released a file")
	}
	if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
		t.Errorf("Verify: %v %+v", err, rep)
	}
	first, next := l.First(), l.Next()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := sparesIn(t, dir); len(left) != 0 {
		t.Errorf("spare files after Close: %v", left)
	}
	if n := openFDs(t, dir); n != 0 {
		t.Errorf("after Close: %d descriptors open on the log's files:\n%s", n, testkit.DescriptorsUnder(t, dir))
	}
	if n := len(testkit.MapsUnder(t, dir)); n != 0 {
		t.Errorf("after Close: %d mappings of the log's files", n)
	}
	r := reopenChurned(t, dir, c.opts, first, next, valid)
	if len(r.Recovery().Notes) > 0 {
		t.Logf("reopened: %q", r.Recovery().Notes)
	}
	if rep, err := r.Verify(nil); err != nil || !rep.Healthy() {
		t.Errorf("reopened: Verify: %v %+v", err, rep)
	}
}

// TestReleaseSparesRacingClose: ReleaseSpares called at once
// with Close, again and again, on logs whose spare files are there (a
// kept file and a prepared segment): after both return, no spare file,
// descriptor or mapping of the log's is left, and the log reopens whole.
func TestReleaseSparesRacingClose(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval, SyncAlways} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			opts := Options{SegmentBytes: 8 << 10, RecycleSegments: 2, Sync: policy, SyncInterval: time.Millisecond}
			dir := t.TempDir()
			for round := range 40 {
				l := mustOpen(t, dir, opts)
				fillGenerationSegments(t, l, len(*l.segs.Load())+4)
				segs := *l.segs.Load()
				if _, err := l.DropBefore(segs[len(segs)-2].Base()); err != nil {
					t.Fatal(err)
				}
				// Past half of the active segment: the preparer is kicked.
				for l.active.End() < opts.SegmentBytes*3/4 {
					if _, err := l.Append(generationBody(l.Next(), 0)); err != nil {
						t.Fatal(err)
					}
				}
				if round%2 == 0 {
					time.Sleep(time.Millisecond) // let the preparer get there
				}
				var wg sync.WaitGroup
				var n int
				wg.Add(1)
				go func() {
					defer wg.Done()
					n = l.ReleaseSpares()
				}()
				if round%3 == 0 {
					time.Sleep(time.Duration(round*20) * time.Microsecond)
				}
				next := l.Next()
				if err := l.Close(); err != nil {
					t.Fatalf("round %d: Close: %v", round, err)
				}
				wg.Wait()
				if left := sparesIn(t, dir); len(left) != 0 {
					t.Fatalf("round %d: spare files after Close and ReleaseSpares (%d released): %v", round, n, left)
				}
				if fds := openFDs(t, dir); fds != 0 {
					t.Fatalf("round %d: %d descriptors open on the log's files:\n%s", round, fds, testkit.DescriptorsUnder(t, dir))
				}
				if m := len(testkit.MapsUnder(t, dir)); m != 0 {
					t.Fatalf("round %d: %d mappings of the log's files", round, m)
				}
				r := mustOpen(t, dir, opts)
				if r.Next() != next {
					t.Fatalf("round %d: reopened at %d, want %d", round, r.Next(), next)
				}
				if len(r.Recovery().Notes) > 0 {
					t.Fatalf("round %d: reopened with notes %q", round, r.Recovery().Notes)
				}
				checkGenerationRecordsFrom(t, r, r.First())
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestReleaseSparesReadOnlyLeavesWriterFiles: a read-only log holds no
// spare files of its own; ReleaseSpares on it removes nothing of the
// writer's (the kept file and the prepared segment stay, and the writer
// rolls into them).
func TestReleaseSparesReadOnlyLeavesWriterFiles(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	fillGenerationSegments(t, w, 8)
	if _, err := w.DropBefore((*w.segs.Load())[3].Base()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); len(dirFilesMatching(t, dir, "prepared.log")) == 0 || len(dirFilesMatching(t, dir, recycledPrefix+"*")) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no kept file and prepared segment together: %v", sparesIn(t, dir))
		}
		if _, err := w.Append(generationBody(w.Next(), 0)); err != nil {
			t.Fatal(err)
		}
		if len(*w.segs.Load()) > 7 {
			if _, err := w.DropBefore((*w.segs.Load())[len(*w.segs.Load())-3].Base()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The writer's preparer (its index files made after its .log, a
	// new file replaced by a kept one) and settle (an idle writer's
	// prepared segment removed) change the spare files on their own:
	// the look before and after holds them still. (Files the same for
	// 100 ms were not enough on a loaded machine.)
	r := mustOpenRO(t, dir, Options{})
	var before, after []string
	var n int
	if !whenQuiet(w, func() {
		before = sparesIn(t, dir)
		n = r.ReleaseSpares()
		after = sparesIn(t, dir)
	}) {
		t.Fatal("the writer's background work never went quiet")
	}
	if n != 0 {
		t.Fatalf("ReleaseSpares on a read-only log: %d", n)
	}
	if !slices.Equal(after, before) {
		t.Fatalf("ReleaseSpares on a read-only log removed the writer's files: %v, then %v", before, after)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.ReleaseSpares(); n != 0 {
		t.Fatalf("ReleaseSpares on a closed read-only log: %d", n)
	}
	first := w.First()
	fillGenerationSegments(t, w, len(*w.segs.Load())+3)
	rollUntilReused(t, w, 0)
	checkGenerationRecordsFrom(t, w, first)
	if st := w.Stats(); st.Recycled == 0 {
		t.Errorf("no segment made from a kept file: %+v", st)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
