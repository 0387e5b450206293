package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

func runDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "[--dir D] [--messages N] [--size S]",
		"Appends N messages of S bytes (sync none), reads them all back without\n"+
			"copying and checks them, closes, reopens and verifies the log. Then runs a\n"+
			"queue: 4 workers send, receive and delete N messages; the first process is\n"+
			"killed with SIGKILL half-way and a second one reopens the queue and finishes,\n"+
			"counting redeliveries. Then makes 10,000 queues in one store, one message\n"+
			"each, reopens it and drains them, with the time per queue and what the\n"+
			"process holds (memory, descriptors, mappings). Prints throughput and latency figures. Works in a new temporary directory that is\n"+
			"removed at the end, or in D, which is kept. Phases are reported on standard\n"+
			"error as they complete, the summary on standard output.", stderr)
	dir := fs.String("dir", "", "log `directory` (default: a new temporary directory, removed at the end)")
	messages := fs.Int("messages", 1_000_000, "number of messages to append")
	size := fs.Int("size", 1024, "bytes per message")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if *messages < 1 {
		return usageError(fs, "--messages %d: want at least 1", *messages)
	}
	if *size < 0 || *size > engine.DefaultMaxRecordBytes {
		return usageError(fs, "--size %d outside [0, %d]", *size, engine.DefaultMaxRecordBytes)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{ctx: ctx, messages: *messages, size: *size, stdout: stdout, stderr: stderr}
	if err := d.run(*dir); err != nil {
		return fail(stderr, "demo", err)
	}
	return 0
}

// demo holds the state shared by the phases of one run.
type demo struct {
	ctx            context.Context
	messages, size int
	stdout, stderr io.Writer

	dir      string
	log      *engine.Log
	first    uint64          // offset of the first message appended
	template []byte          // every message: its index in the first 8 bytes, then this
	lat      []time.Duration // one latency per operation, reused by each phase
	summary  []string        // lines printed at the end
}

// demoPhases run in order. A phase reports its figures by appending to
// d.summary; a later phase (a queue, say) is one more function here.
var demoPhases = []struct {
	name string
	run  func(d *demo) error
}{
	{"append", (*demo).appendPhase},
	{"read", (*demo).readPhase},
	{"reopen", (*demo).reopenPhase},
	{"verify", (*demo).verifyPhase},
	{"queue", (*demo).queuePhase},
	{"store", (*demo).storePhase},
}

// run prepares the directory, runs every phase and prints the summary.
func (d *demo) run(dir string) (err error) {
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pagelog-demo-"); err != nil {
			return err
		}
		defer func() {
			if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
				err = rerr
			}
		}()
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d.dir = dir
	if err := d.checkSpace(); err != nil {
		return err
	}
	defer func() {
		if d.log != nil {
			if cerr := d.log.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	d.template = makeTemplate(d.size)
	d.lat = make([]time.Duration, d.messages)
	fmt.Fprintf(d.stderr, "pagelog demo: %d messages of %d bytes in %s\n", d.messages, d.size, d.dir)
	start := time.Now()
	for _, p := range demoPhases {
		t0 := time.Now()
		if err := p.run(d); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Fprintf(d.stderr, "  %-7s done in %s\n", p.name, fmtDur(time.Since(t0)))
	}
	total := time.Since(start)
	fmt.Fprintf(d.stdout, "pagelog demo: %d messages of %d bytes (%s of records), sync none\n",
		d.messages, d.size, formatBytes(d.recordBytes()))
	fmt.Fprintf(d.stdout, "%-7s %10s %9s %10s %12s %10s %10s\n", "phase", "count", "time", "MB/s", "records/s", "p50", "p99")
	for _, line := range d.summary {
		fmt.Fprintln(d.stdout, line)
	}
	fmt.Fprintf(d.stdout, "%-7s %s\n", "total", fmtDur(total))
	return nil
}

// recordBytes is the size of the records on disk: 16 bytes of header each.
func (d *demo) recordBytes() int64 { return int64(d.messages) * int64(d.size+16) }

// checkSpace refuses to start when the file system holds less than three
// times the data: the log, the queue, their indexes and preallocated tails.
func (d *demo) checkSpace() error {
	free, err := freeBytes(d.dir)
	if err != nil {
		return err
	}
	need := 3 * d.recordBytes()
	if free < need {
		return fmt.Errorf("not enough disk space in %s: %s of records needs %s free, %s available (use --messages, --size or --dir)",
			d.dir, formatBytes(d.recordBytes()), formatBytes(need), formatBytes(free))
	}
	return nil
}

// interrupted is checked every checkEvery operations.
const checkEvery = 1 << 14

func (d *demo) interrupted() error {
	if err := d.ctx.Err(); err != nil {
		return errors.New("interrupted")
	}
	return nil
}

func (d *demo) appendPhase() error {
	l, err := engine.Open(d.dir, engine.Options{Sync: engine.SyncNone})
	if err != nil {
		return err
	}
	d.log = l
	d.first = l.Next()
	body := slices.Clone(d.template)
	bar := newProgress(d.stderr, "append", int64(d.messages), nil)
	defer bar.finish()
	start := time.Now()
	for i := range d.messages {
		stamp(body, uint64(i))
		t0 := time.Now()
		off, err := l.Append(body)
		d.lat[i] = time.Since(t0)
		if err != nil {
			return err
		}
		if want := d.first + uint64(i); off != want {
			return fmt.Errorf("message %d got offset %d, want %d", i, off, want)
		}
		if i%checkEvery == 0 {
			bar.update(int64(i))
			if err := d.interrupted(); err != nil {
				return err
			}
		}
	}
	d.summary = append(d.summary, d.opsLine("append", time.Since(start)))
	return nil
}

func (d *demo) readPhase() error {
	l := d.log
	bar := newProgress(d.stderr, "read", int64(d.messages), nil)
	defer bar.finish()
	start := time.Now()
	for i := range d.messages {
		t0 := time.Now()
		rec, err := l.Read(d.first + uint64(i))
		if err != nil {
			return err
		}
		ok := d.check(rec.Body, uint64(i))
		rec.Release()
		d.lat[i] = time.Since(t0)
		if !ok {
			return fmt.Errorf("offset %d: body differs from what was appended", d.first+uint64(i))
		}
		if i%checkEvery == 0 {
			bar.update(int64(i))
			if err := d.interrupted(); err != nil {
				return err
			}
		}
	}
	d.summary = append(d.summary, d.opsLine("read", time.Since(start)))
	return nil
}

func (d *demo) reopenPhase() error {
	t0 := time.Now()
	err := d.log.Close()
	d.log = nil
	closeTook := time.Since(t0)
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	t0 = time.Now()
	l, err := engine.Open(d.dir, engine.Options{})
	took := time.Since(t0)
	if err != nil {
		return err
	}
	d.log = l
	r := l.Recovery()
	d.summary = append(d.summary, fmt.Sprintf(
		"%-7s open %s (close before it %s): %d segments, active segment walked %d records (%s), %d torn bytes cut, %d indexes rebuilt",
		"reopen", fmtDur(took), fmtDur(closeTook), r.Segments, r.Active.Records, formatBytes(r.Active.Walked),
		r.TruncatedBytes, r.IndexesRebuilt))
	return nil
}

func (d *demo) verifyPhase() error {
	var bar *progress
	t0 := time.Now()
	rep, err := d.log.Verify(func(done, total int64) {
		if bar == nil {
			bar = newProgress(d.stderr, "verify", total, formatBytes)
		}
		bar.update(done)
	})
	took := time.Since(t0)
	bar.finish()
	if err != nil {
		return err
	}
	if !rep.Healthy() {
		var b bytes.Buffer
		writeVerifyReport(&b, rep, d.log.First(), d.log.Next(), took)
		return fmt.Errorf("the log is not healthy:\n%s", b.String())
	}
	if want := d.log.Next() - d.log.First(); rep.Records != want {
		return fmt.Errorf("verified %d records, the log holds %d", rep.Records, want)
	}
	d.summary = append(d.summary, fmt.Sprintf("%-7s %10d %9s %10.1f %12.0f  healthy: %d segments, %s",
		"verify", rep.Records, fmtDur(took), float64(rep.Bytes)/1e6/took.Seconds(),
		float64(rep.Records)/took.Seconds(), rep.Segments, formatBytes(rep.Bytes)))
	return nil
}

// opsLine summarises d.lat for a phase of d.messages operations: count,
// wall time, throughput in MB/s (10^6 bytes of message body) and records/s,
// and the p50 and p99 latency of one operation. It sorts d.lat.
func (d *demo) opsLine(name string, wall time.Duration) string {
	slices.Sort(d.lat)
	secs := wall.Seconds()
	return fmt.Sprintf("%-7s %10d %9s %10.1f %12.0f %10s %10s", name, d.messages, fmtDur(wall),
		float64(d.messages)*float64(d.size)/1e6/secs, float64(d.messages)/secs,
		fmtDur(percentile(d.lat, 0.50)), fmtDur(percentile(d.lat, 0.99)))
}

// percentile returns the q-th quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// makeTemplate returns a message of size bytes of readable letters.
func makeTemplate(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// stamp writes the message's index, big-endian, over its first 8 bytes (or
// as many as it has), so that every message differs.
func stamp(body []byte, i uint64) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], i)
	if len(body) >= 8 {
		copy(body, n[:])
		return
	}
	copy(body, n[8-len(body):])
}

// check reports whether body is message i as appended.
func (d *demo) check(body []byte, i uint64) bool {
	if len(body) != d.size {
		return false
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], i)
	if d.size < 8 {
		return bytes.Equal(body, n[8-d.size:])
	}
	return bytes.Equal(body[:8], n[:]) && bytes.Equal(body[8:], d.template[8:])
}

// fmtDur renders d with three significant digits or so: 812ns, 1.25µs,
// 3.40ms, 1.23s.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// queuePhase runs the queue demo in d.dir/queue: a child process works
// until the parent kills it (SIGKILL) half-way, then the parent reopens the
// queue and finishes with 4 workers. A marks file shared with the child
// tells which messages each process received and deleted.
func (d *demo) queuePhase() (err error) {
	qdir := filepath.Join(d.dir, "queue")
	marksPath := filepath.Join(d.dir, "queue-demo.marks")
	if err := os.RemoveAll(qdir); err != nil {
		return err
	}
	marks, err := mapMarks(marksPath, d.messages, true)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, unmapMarks(marks), os.Remove(marksPath))
	}()
	child, err := d.runQueueChild(qdir, marksPath)
	if err != nil {
		return err
	}
	t0 := time.Now()
	q, err := queue.Open(qdir, queue.Options{})
	if err != nil {
		return err
	}
	opened := time.Since(t0)
	w := &queueWorkers{d: d, q: q, marks: marks, recv: markReceived2, del: markDeleting2,
		lat: make([][]time.Duration, queueDemoWorkers)}
	start := time.Now()
	err = w.run(d.ctx, int64(q.Stats().End), true)
	wall := time.Since(start)
	final, rec := q.Stats(), q.Recovery()
	if err = errors.Join(err, q.Close()); err != nil {
		return err
	}
	twice, err := checkAllDeleted(marks, final)
	if err != nil {
		return err
	}
	d.lat = slices.Concat(w.lat...)
	n := len(d.lat)
	d.summary = append(d.summary,
		fmt.Sprintf("%-7s first process: %d send+receive+delete cycles in %s (%.0f cycles/s), then killed with SIGKILL",
			"queue", child.cycles, fmtDur(child.took), float64(child.cycles)/child.took.Seconds()),
		fmt.Sprintf("%-7s reopened in %s at head %d (%s), %d delete records replayed",
			"queue", fmtDur(opened), rec.Head, rec.HeadFrom, rec.DeleteRecords),
		d.queueLine(n, wall),
		fmt.Sprintf("%-7s redeliveries: %d (deleted by both processes: %d); all %d messages deleted, queue empty (head = end = %d)",
			"queue", w.redelivered.Load(), twice, d.messages, final.End))
	return nil
}

// queueLine is the figures line of the second process: cycles, wall time,
// MB/s of bodies, cycles/s, p50 and p99 of a cycle.
func (d *demo) queueLine(n int, wall time.Duration) string {
	slices.Sort(d.lat)
	secs := wall.Seconds()
	return fmt.Sprintf("%-7s %10d %9s %10.1f %12.0f %10s %10s", "queue", n, fmtDur(wall),
		float64(n)*float64(d.size)/1e6/secs, float64(n)/secs,
		fmtDur(percentile(d.lat, 0.50)), fmtDur(percentile(d.lat, 0.99)))
}

// checkAllDeleted checks that every message had a Delete called in one of
// the processes and that the queue is empty; it returns how many messages
// were deleted by both.
func checkAllDeleted(marks []uint32, final queue.Stats) (int, error) {
	twice := 0
	for i, m := range marks {
		if m&(markDeleting|markDeleting2) == 0 {
			return 0, fmt.Errorf("message %d was never deleted", i)
		}
		if m&markDeleting != 0 && m&markDeleting2 != 0 {
			twice++
		}
	}
	if final.End != uint64(len(marks)) || final.Head != final.End {
		return 0, fmt.Errorf("queue not empty at the end: %+v", final)
	}
	return twice, nil
}

// childRun is what the killed process reported last.
type childRun struct {
	cycles int64
	took   time.Duration
}

// runQueueChild starts the queue demo's child and kills it with SIGKILL
// once it reports half of the messages done.
func (d *demo) runQueueChild(qdir, marksPath string) (childRun, error) {
	var run childRun
	exe, err := os.Executable()
	if err != nil {
		return run, err
	}
	cmd := exec.Command(exe, qdir, marksPath, strconv.Itoa(d.messages), strconv.Itoa(d.size))
	cmd.Env = append(os.Environ(), demoChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return run, err
	}
	if err := cmd.Start(); err != nil {
		return run, err
	}
	kill := func() { _ = cmd.Process.Signal(syscall.SIGKILL) }
	defer context.AfterFunc(d.ctx, kill)()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var ns int64
		if _, err := fmt.Sscanf(sc.Text(), "progress %d %d", &run.cycles, &ns); err == nil {
			run.took = time.Duration(ns)
		}
		if run.cycles >= int64(d.messages/2) {
			kill()
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return run, fmt.Errorf("queue child: %v, want it killed: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := d.interrupted(); err != nil {
		return run, err
	}
	return run, nil
}
