package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/mmapfile"
)

// Streams: how soon a reader sees an append, in this process and in
// another; what followers cost the writer; what a cursor commit costs.
//
// Each record is 1 KiB and carries, in its first 8 bytes, the wall clock
// (Unix ns) read just before Append was called: the reader subtracts it
// from the clock it reads once it holds the verified record. Both clocks
// are the same system clock (vDSO), so the figure is append-to-read
// across processes too, Append's own cost included. The writer appends a
// record only once the reader acknowledged the one before (through a
// word of shared memory) and a gap passed, so that each figure is the
// latency of one record, not of a queue behind a reader the scheduler
// put aside.

// streamEnv makes the benchmark binary a stream reader process (see
// runStreamChild): the value is the way it waits.
const (
	streamEnv    = "PAGELOG_BENCH_STREAM"
	streamDirEnv = "PAGELOG_BENCH_STREAM_DIR"
	streamNEnv   = "PAGELOG_BENCH_STREAM_N"
)

const streamRecord = 1024

// stamp puts the wall clock in body's first 8 bytes.
func stamp(body []byte) {
	binary.LittleEndian.PutUint64(body, uint64(time.Now().UnixNano()))
}

// since returns the time since the stamp in body.
func since(body []byte) time.Duration {
	return time.Duration(time.Now().UnixNano() - int64(binary.LittleEndian.Uint64(body)))
}

// pace busy-waits until t.
func pace(t time.Time) {
	for time.Now().Before(t) {
	}
}

// BenchmarkVisibility measures append-to-read latency of 1 KiB records:
//
//   - reader=spin-same: a goroutine of the writer's process, Wait with
//     WaitSpin (never sleeps), then Read;
//   - reader=spin-other: a read-only Log in another process, the same way
//     (it reads log.notify's word, then the records through its mapping);
//   - reader=block-other: a read-only Log in another process whose Wait
//     sleeps on log.notify's futex word (one append every 200 µs, so it is
//     asleep when each comes).
func BenchmarkVisibility(b *testing.B) {
	b.Run("reader=spin-same", func(b *testing.B) {
		dir := b.TempDir()
		l, err := engine.Open(dir, engine.Options{WaitSpin: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		lat := make(latencies, 0, b.N)
		var read atomic.Uint64
		done := make(chan error, 1)
		go func() {
			ctx := context.Background()
			for off := uint64(0); off < uint64(b.N); off++ {
				if err := l.Wait(ctx, off); err != nil {
					done <- err
					return
				}
				r, err := l.Read(off)
				if err != nil {
					done <- err
					return
				}
				lat = append(lat, since(r.Body))
				r.Release()
				read.Store(off + 1)
			}
			done <- nil
		}()
		body := make([]byte, streamRecord)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t := time.Now().Add(2 * time.Microsecond)
			for read.Load() < uint64(i) {
			}
			pace(t)
			stamp(body)
			if _, err := l.Append(body); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		lat.report(b)
	})
	b.Run("reader=spin-other", func(b *testing.B) { visibilityOther(b, "spin", 20*time.Microsecond) })
	b.Run("reader=block-other", func(b *testing.B) { visibilityOther(b, "block", 200*time.Microsecond) })
}

// BenchmarkCoreToCore is the floor under every append-to-read figure: one
// cache line passed back and forth between two goroutines spinning on
// it, each on a core of its own (GOMAXPROCS 2). One op is a round trip:
// the writer's store reaching a reader on another core, and the answer
// coming back. A record seen by a spinning reader needs at least the
// line that says it exists and the lines that hold it, each one of these
// trips' halves.
func BenchmarkCoreToCore(b *testing.B) {
	var line struct {
		_ [64]byte
		v atomic.Uint64
		_ [56]byte
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); i <= uint64(b.N); i++ {
			for line.v.Load() != 2*i-1 {
			}
			line.v.Store(2 * i)
		}
	}()
	b.ResetTimer()
	for i := uint64(1); i <= uint64(b.N); i++ {
		line.v.Store(2*i - 1)
		for line.v.Load() != 2*i {
		}
	}
	<-done
}

// BenchmarkWake compares how a reader in another process blocks until the
// next record: wake=futex is Wait on a read-only Log (a futex on
// log.notify's word, which the writer wakes when a reader announced it
// sleeps); wake=inotify blocks in read(2) on an inotify descriptor
// watching a file the writer writes one byte into after every append (a
// write through a mapping makes no inotify event, so the writer must make
// a system call per append); wake=poll sleeps 1 µs, then twice as long each
// time up to 1 ms, and looks again. One append every 200 µs. The writer's
// own cost per append is reported as append-ns.
func BenchmarkWake(b *testing.B) {
	for _, mech := range []string{"futex", "inotify", "poll"} {
		b.Run("wake="+mech, func(b *testing.B) {
			role := mech
			if mech == "futex" {
				role = "block"
			}
			if mech == "inotify" && runtime.GOOS != "linux" {
				b.Skip("inotify is Linux's")
			}
			visibilityOther(b, role, 200*time.Microsecond)
		})
	}
}

// visibilityOther runs a reader process of the given role and appends b.N
// records, each a gap after the reader acknowledged the one before (a
// busy wait for gaps under 100 µs, a sleep above: a reader that blocks is
// asleep by then); the reader reports its latencies.
func visibilityOther(b *testing.B, role string, gap time.Duration) {
	dir := b.TempDir()
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var poke *os.File
	if role == "inotify" {
		if poke, err = os.Create(filepath.Join(dir, "poke")); err != nil {
			b.Fatal(err)
		}
		defer poke.Close()
	}
	ack := mapAck(b, dir)
	c := startStreamChild(b, role, dir, b.N)
	body := make([]byte, streamRecord)
	var appendTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for atomic.LoadUint64(ack) < uint64(i) {
		}
		if gap < 100*time.Microsecond {
			pace(time.Now().Add(gap))
		} else {
			time.Sleep(gap)
		}
		start := time.Now()
		stamp(body)
		if _, err := l.Append(body); err != nil {
			b.Fatal(err)
		}
		if poke != nil {
			if _, err := poke.WriteAt([]byte{byte(i)}, 0); err != nil {
				b.Fatal(err)
			}
		}
		appendTime += time.Since(start)
	}
	lat := c.latencies(b)
	b.StopTimer()
	lat.report(b)
	b.ReportMetric(float64(appendTime.Nanoseconds())/float64(b.N), "append-ns")
}

// BenchmarkFanOut measures the writer appending 1 KiB records as fast as
// it can (the timed operation), alone and with 4 follower processes that
// each read every record (Wait on a read-only Log, then Read), verifying
// it; followers report how far behind the writer's end they were at its
// last append (max-lag, in records) and the time they needed after the
// writer's last append to read it (drain-ns).
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{0, 4} {
		b.Run(fmt.Sprintf("followers=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			l, err := engine.Open(dir, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			children := make([]*streamChild, n)
			for i := range children {
				children[i] = startStreamChild(b, "fanout", dir, b.N)
			}
			body := make([]byte, streamRecord)
			b.SetBytes(streamRecord)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				binary.LittleEndian.PutUint64(body[8:], uint64(i))
				if _, err := l.Append(body); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			end := time.Now()
			var drain time.Duration
			for _, c := range children {
				c.finish(b)
				drain = max(drain, c.doneAt.Sub(end))
			}
			if n > 0 {
				b.ReportMetric(float64(max(drain, 0).Nanoseconds()), "drain-ns")
			}
		})
	}
}

// BenchmarkCursorCommit measures Cursor.Commit, every one timed: under
// SyncNone (the position goes into the page cache through a mapping) and
// SyncAlways (then an fdatasync of the position file), beside one
// fdatasync of a 64-byte file after a 32-byte pwrite (the floor a synced
// commit is held to).
func BenchmarkCursorCommit(b *testing.B) {
	dir := b.TempDir()
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, streamRecord)
	for range 100 {
		if _, err := l.Append(body); err != nil {
			b.Fatal(err)
		}
	}
	_ = l.Close()
	for _, p := range []engine.SyncPolicy{engine.SyncNone, engine.SyncAlways} {
		b.Run("sync="+p.String(), func(b *testing.B) {
			c, err := engine.OpenCursor(dir, "bench-"+p.String(), engine.CursorOptions{Sync: p})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			lat := make(latencies, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.Seek(uint64(i % 100)); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := c.Commit(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			lat.report(b)
		})
	}
	b.Run("sync=fdatasync-alone", func(b *testing.B) {
		f, err := os.Create(filepath.Join(dir, "alone"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(64); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 32)
		lat := make(latencies, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			buf[0] = byte(i)
			if _, err := f.WriteAt(buf, int64(i%2)*32); err != nil {
				b.Fatal(err)
			}
			if err := mmapfile.Datasync(f); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		lat.report(b)
	})
}

// mapAck maps the word through which a reader process acknowledges the
// records it read (the file "ack" in dir, made by the first caller).
func mapAck(tb testing.TB, dir string) *uint64 {
	f, err := os.OpenFile(filepath.Join(dir, "ack"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		tb.Fatal(err)
	}
	m, err := mmapfile.Map(f, 4096, true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = mmapfile.Unmap(m) })
	return (*uint64)(unsafe.Pointer(&m[0]))
}

// streamChild is a reader process of the stream benchmarks.
type streamChild struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	stderr strings.Builder
	doneAt time.Time
}

func startStreamChild(b *testing.B, role, dir string, n int) *streamChild {
	b.Helper()
	c := &streamChild{}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	c.cmd.Env = append(os.Environ(), streamEnv+"="+role, streamDirEnv+"="+dir, streamNEnv+"="+strconv.Itoa(n))
	c.cmd.Stderr = &c.stderr
	c.cmd.SysProcAttr = dieWithParent()
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.cmd.Process.Kill() })
	c.out = bufio.NewReader(out)
	line, err := c.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		b.Fatalf("stream child %s: %q %v\n%s", role, line, err, c.stderr.String())
	}
	return c
}

// latencies reads the child's latencies (one int64 of nanoseconds each)
// and waits for it.
func (c *streamChild) latencies(b *testing.B) latencies {
	var lat latencies
	var w [8]byte
	for {
		if _, err := io.ReadFull(c.out, w[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				b.Fatalf("stream child: %v\n%s", err, c.stderr.String())
			}
			break
		}
		lat = append(lat, time.Duration(binary.LittleEndian.Uint64(w[:])))
	}
	c.finish(b)
	return lat
}

func (c *streamChild) finish(b *testing.B) {
	_, _ = io.Copy(io.Discard, c.out)
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("stream child: %v\n%s", err, c.stderr.String())
	}
	if s := strings.TrimSpace(c.stderr.String()); strings.HasPrefix(s, "done ") {
		ns, _ := strconv.ParseInt(strings.TrimPrefix(s, "done "), 10, 64)
		c.doneAt = time.Unix(0, ns)
	}
}

// runStreamChild is a reader process: it opens the log read-only, reads n
// records the way role says, and writes what it measured to stdout.
func runStreamChild(role string) int {
	dir := os.Getenv(streamDirEnv)
	n, _ := strconv.Atoi(os.Getenv(streamNEnv))
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := engine.Options{}
	if role == "spin" {
		opts.WaitSpin = -1
	}
	l, err := engine.OpenReadOnly(dir, opts)
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	var waitPoke func() error
	if role == "inotify" {
		if waitPoke, err = watchWrites(filepath.Join(dir, "poke")); err != nil {
			return fail(err)
		}
	}
	var ack *uint64
	if role != "fanout" {
		ack = mapAck(&childTB{}, dir)
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	if err := out.Flush(); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	var w [8]byte
	lat := make([]time.Duration, 0, n)
	for off := uint64(0); off < uint64(n); off++ {
		switch role {
		case "spin", "block", "fanout":
			if err := l.Wait(ctx, off); err != nil {
				return fail(err)
			}
		case "inotify":
			for off >= l.Next() {
				if err := waitPoke(); err != nil {
					return fail(err)
				}
			}
		case "poll":
			for d := time.Microsecond; off >= l.Next(); d = min(2*d, time.Millisecond) {
				time.Sleep(d)
			}
		}
		r, err := l.Read(off)
		if err != nil {
			return fail(err)
		}
		if role == "fanout" {
			if binary.LittleEndian.Uint64(r.Body[8:]) != off || len(r.Body) != streamRecord {
				return fail(fmt.Errorf("record %d is not the one written", off))
			}
			r.Release()
			continue
		}
		lat = append(lat, since(r.Body))
		r.Release()
		atomic.StoreUint64(ack, off+1)
	}
	fmt.Fprintf(os.Stderr, "done %d\n", time.Now().UnixNano())
	// Written at the end: a full pipe must not stall the reader.
	for _, d := range lat {
		binary.LittleEndian.PutUint64(w[:], uint64(d))
		out.Write(w[:])
	}
	if err := out.Flush(); err != nil {
		return fail(err)
	}
	return 0
}

// childTB is the testing.TB of a reader process: failures end it.
type childTB struct{ testing.TB }

func (childTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}

func (childTB) Cleanup(func()) {}
