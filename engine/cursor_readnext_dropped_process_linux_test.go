//go:build linux

package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// Readers in this process beside a writer in another that appends, rolls
// 4 KiB segments, drops all but the newest three and reuses their files
// (RecycleSegments): a Cursor, and logs opened read-only with a small
// MaxMappedSegments that read with ReadNext, slowly enough to fall
// behind the drops. Every record they get is whole and in order, every
// report is of dropped offsets (a fresh open's first record lies past
// them), and none is of damage.

const droppingWriterEnvDir = "PAGELOG_DROPPING_WRITER_DIR"

// TestReadNextBesideDroppingProcessChild is the writer of
// TestReadNextBesideDroppingProcess: it appends until its stdin closes.
func TestReadNextBesideDroppingProcessChild(t *testing.T) {
	dir := os.Getenv(droppingWriterEnvDir)
	if dir == "" {
		t.Skip("a child of TestReadNextBesideDroppingProcess")
	}
	if err := runDroppingWriter(dir); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runDroppingWriter(dir string) error {
	l, err := Open(dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	if err != nil {
		return err
	}
	var stop atomic.Bool
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		stop.Store(true)
	}()
	fmt.Println("open")
	for i := 0; !stop.Load(); i++ {
		off := l.Next()
		if _, err := l.Append(generationBody(off, 0)); err != nil {
			return err
		}
		if segs := *l.segs.Load(); len(segs) > 3 {
			if _, err := l.DropBefore(segs[len(segs)-3].Base()); err != nil {
				return err
			}
		}
		if i%8 == 7 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return l.Close()
}

// droppingReaderResult is what one reader found.
type droppingReaderResult struct {
	name    string
	records atomic.Int64
	reports atomic.Int64
	changed atomic.Int64 // records whose bytes changed under the reader once dropped
	err     error
}

// firstOffsetNow returns the first offset of the log in dir as a read-only
// open finds it now (0 when it cannot be opened).
func firstOffsetNow(dir string) uint64 {
	l, err := OpenReadOnly(dir, Options{})
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.First()
}

func TestReadNextBesideDroppingProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := testkit.Child("TestReadNextBesideDroppingProcessChild")
	cmd.Env = append(os.Environ(), droppingWriterEnvDir+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := testkit.StartChild(t, cmd)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := testkit.Lines(stdout, 4)
	select {
	case l, ok := <-lines:
		if !ok || l != "open" {
			t.Fatalf("writer: %q\n%s", l, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the writer never opened the log")
	}

	// check says whether a report of offsets [from, next) as dropped is
	// true: a log opened now starts at or past next.
	check := func(from, next uint64, err error) error {
		if errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrTrimmed) {
			return fmt.Errorf("report at %d: %w", from, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprint(from)) {
			return fmt.Errorf("report at %d does not name it: %v", from, err)
		}
		fresh, ferr := OpenReadOnly(dir, Options{})
		if ferr != nil {
			return ferr
		}
		defer fresh.Close()
		if first := fresh.First(); first < next {
			return fmt.Errorf("offsets [%d, %d) reported dropped (%v), and the log starts at %d", from, next, err, first)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Bool
	var readers []*droppingReaderResult
	// read runs one reader: next reads at off and returns what ReadNext
	// does.
	read := func(r *droppingReaderResult, pause time.Duration, next func(ctx context.Context, off uint64) (Record, uint64, error), start uint64) {
		defer wg.Done()
		off := start
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			rec, nxt, err := next(rctx, off)
			rcancel()
			switch {
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
				continue
			case err == nil:
				verr := checkGenerationBody(rec, off)
				rec.Release()
				if verr != nil {
					// The writer may reuse the file of a segment whose
					// record a reader in another process holds: its
					// bytes may change under the record (see
					// Options.RecycleSegments). Not so for a record still
					// in the log.
					if first := firstOffsetNow(dir); first <= off {
						r.err = fmt.Errorf("%s: %w (the log starts at %d)", r.name, verr, first)
						failed.Store(true)
						return
					}
					r.changed.Add(1)
				}
				r.records.Add(1)
			default:
				if cerr := check(off, nxt, err); cerr != nil {
					r.err = fmt.Errorf("%s: %w", r.name, cerr)
					failed.Store(true)
					return
				}
				r.reports.Add(1)
			}
			if nxt <= off {
				r.err = fmt.Errorf("%s: ReadNext(%d): next %d (%v)", r.name, off, nxt, err)
				failed.Store(true)
				return
			}
			off = nxt
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}
	c, err := OpenCursor(dir, "dropped", CursorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cr := &droppingReaderResult{name: "cursor"}
	readers = append(readers, cr)
	wg.Add(1)
	go read(cr, 300*time.Microsecond, func(ctx context.Context, off uint64) (Record, uint64, error) {
		if c.Position() != off {
			return Record{}, off, fmt.Errorf("cursor at %d, want %d", c.Position(), off)
		}
		rec, err := c.Next(ctx)
		return rec, c.Position(), err
	}, c.Position())
	for i, maxMapped := range []int{1, 2} {
		l, err := OpenReadOnly(dir, Options{MaxMappedSegments: maxMapped})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		r := &droppingReaderResult{name: fmt.Sprintf("read-only %d (MaxMappedSegments %d)", i, maxMapped)}
		readers = append(readers, r)
		wg.Add(1)
		go read(r, time.Duration(i+1)*time.Millisecond, l.ReadNext, l.First())
	}
	// Until every reader got records and reports, or one failed.
	deadline := time.Now().Add(90 * time.Second)
	for {
		done := true
		for _, r := range readers {
			done = done && r.records.Load() >= 200 && r.reports.Load() >= 3
		}
		if done || failed.Load() || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	fmt.Fprintln(stdin)
	_ = stdin.Close()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("writer: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the writer did not end\n%s", stderr.String())
	}
	for _, r := range readers {
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("%s: %d records (%d changed under the reader once dropped), %d reports of dropped offsets",
			r.name, r.records.Load(), r.changed.Load(), r.reports.Load())
	}
	for _, r := range readers {
		if r.records.Load() < 200 || r.reports.Load() < 3 {
			t.Fatalf("%s: %d records and %d reports in 90s: too little happened", r.name, r.records.Load(), r.reports.Load())
		}
	}
}
