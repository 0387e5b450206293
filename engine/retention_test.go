package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RetentionBytes keeps the log's segments near the limit, drops only
// whole sealed segments, oldest first, and reads of dropped offsets say so.
func TestRetentionBytes(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 64 << 10
	l := mustOpen(t, dir, Options{SegmentBytes: segBytes, RetentionBytes: 4 * segBytes})
	defer l.Close()
	for i := range 2000 { // about 2 MiB: 32 segments' worth
		if _, err := l.Append(testBody(uint64(i), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for l.Stats().Segments > 6 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// A pass kicked by the last roll may still be due: run passes until
	// one drops nothing, so that what is read below stays.
	for {
		if n, err := l.retain(); err != nil || n == 0 {
			break
		}
	}
	st := l.Stats()
	if st.Segments > 6 || st.First == 0 {
		t.Fatalf("after 2 MiB under a 256 KiB retention: %d segments, first %d", st.Segments, st.First)
	}
	// The files of dropped segments go in the background, after the
	// drop leaves the list: wait for them (a loaded machine is slow), so
	// that only files the log keeps fail the bound.
	var bytes int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		bytes = 0
		for _, f := range logFiles(t, dir) {
			bytes += f.size
		}
		if bytes <= 7*segBytes || time.Now().After(deadline) {
			break
		}
	}
	if bytes > 7*segBytes {
		t.Fatalf("segments take %d bytes, want about RetentionBytes (%d) plus the active segment's allocation", bytes, 4*segBytes)
	}
	if _, err := l.Read(st.First - 1); !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrTrimmed) {
		t.Fatalf("Read of a dropped offset: %v, want ErrTrimmed matching ErrNotFound", err)
	}
	for off := st.First; off < st.Next; off++ {
		r, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d) of a kept record: %v", off, err)
		}
		r.Release()
	}
}

// RetentionAge drops sealed segments whose newest record is older than the
// limit, and never the active one.
func TestRetentionAge(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	opts := Options{SegmentBytes: 16 << 10, RetentionAge: time.Hour}
	opts.now = func() time.Time { return time.Unix(0, now.Load()) }
	l := mustOpen(t, dir, opts)
	defer l.Close()
	old := appendN(t, l, 100, func(uint64) int { return 1000 }) // several segments
	now.Add(int64(90 * time.Minute))
	young := appendN(t, l, 40, func(uint64) int { return 1000 })
	if _, err := l.retain(); err != nil {
		t.Fatal(err)
	}
	first := l.First()
	if first == 0 || first > uint64(len(old)) {
		t.Fatalf("First = %d after the old segments aged out; want in (0, %d]", first, len(old))
	}
	// Everything appended after the clock moved is still there.
	for off := uint64(len(old)); off < uint64(len(old)+len(young)); off++ {
		r, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		r.Release()
	}
	// Hours later nothing is young: every sealed segment goes, the active
	// one stays.
	now.Add(int64(10 * time.Hour))
	if _, err := l.retain(); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Segments != 1 {
		t.Fatalf("%d segments after everything aged out, want the active one", st.Segments)
	}
}

// A reader holding records of segments retention drops keeps reading their
// bytes, under concurrent appends and retention (run under -race).
func TestRetentionBesideReaders(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 16 << 10, RetentionBytes: 64 << 10})
	defer l.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []Record
			for {
				select {
				case <-stop:
					for _, r := range held {
						r.Release()
					}
					return
				default:
				}
				off := l.First()
				r, err := l.Read(off)
				if err != nil {
					if errors.Is(err, ErrNotFound) {
						continue // dropped between First and Read
					}
					errc <- err
					return
				}
				held = append(held, r)
				for _, h := range held {
					if want := testBody(h.Offset, 300); string(h.Body) != string(want) {
						errc <- errors.New("a held record changed under its reader")
						return
					}
				}
				if len(held) > 20 {
					held[0].Release()
					held = held[1:]
				}
			}
		}()
	}
	for i := range 5000 {
		if _, err := l.Append(testBody(uint64(i), 300)); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			if _, err := l.retain(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if l.First() == 0 {
		t.Fatal("retention dropped nothing")
	}
}

func TestRetentionOptionsValidated(t *testing.T) {
	for _, o := range []Options{{RetentionBytes: -1}, {RetentionAge: -time.Second}} {
		if _, err := Open(t.TempDir(), o); !errors.Is(err, ErrBadOptions) {
			t.Fatalf("Open(%+v): %v, want ErrBadOptions", o, err)
		}
	}
}
