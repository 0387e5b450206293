//go:build linux

package engine

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

var (
	stressDuration = flag.Duration("stress.duration", 3*time.Second, "how long TestReadersBesideWriter runs its processes")
	stressReaders  = flag.Int("stress.readers", 3, "reader processes of TestReadersBesideWriter")
)

// Segments of the stress writer are tiny, so that it rolls hundreds of
// times a second, and it drops old segments as it goes.
const (
	stressSegmentBytes = 8 << 10
	stressKeep         = 3000 // records the writer keeps behind its end
	stressDropEvery    = 97   // appends between two DropBefore calls
)

// stressBody is the body of the record at off: its length and bytes follow
// from the offset, so that any process can check any record.
func stressBody(off uint64) []byte {
	return testBody(off, 20+int(off*2654435761%300))
}

// TestReadersBesideWriter runs a writer process that appends to a log of
// tiny segments (hundreds of rolls a second) and drops old segments, and
// reader processes beside it that loop: OpenReadOnly, Read of random
// offsets (every body checked byte for byte, dropped offsets allowed to be
// ErrNotFound), Records over a random range, and now and then Verify, which
// must find the log healthy. No process may crash or see any other error.
// make crash-long runs it for a minute.
func TestReadersBesideWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes for seconds")
	}
	seed := crashSeedFor(t)
	dir := t.TempDir()
	writer := startStressChild(t, "writer", dir, seed)
	// Let the log have a few segments before the readers come.
	for deadline := time.Now().Add(time.Minute); ; {
		if bases, _ := listSegments(dir); len(bases) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer made no segments in a minute: %s", writer.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	readers := make([]*stressChild, *stressReaders)
	for i := range readers {
		readers[i] = startStressChild(t, "reader", dir, seed+uint64(i)+1)
	}
	time.Sleep(*stressDuration)
	total := stressCounts{}
	for i, r := range readers {
		c := r.stop(t)
		t.Logf("reader %d: %s", i, c)
		total.add(c)
	}
	w := writer.stop(t)
	t.Logf("writer: %s", w)
	t.Logf("seed %d, %v: writer %d appends, %d segments rolled, %d dropped; readers %d opens, %d reads (%d of dropped offsets), %d records iterated, %d verifies healthy",
		seed, *stressDuration, w["appends"], w["rolls"], w["dropped"], total["opens"], total["reads"], total["dropped-reads"], total["records"], total["verifies"])
	if total["opens"] == 0 || total["reads"] == 0 || total["verifies"] == 0 || w["rolls"] < 10 {
		t.Fatalf("too little happened to test anything")
	}
}

// stressCounts are what a child reports when it stops: "name value" pairs.
type stressCounts map[string]int64

func (c stressCounts) add(o stressCounts) {
	for k, v := range o {
		c[k] += v
	}
}

func (c stressCounts) String() string {
	var b strings.Builder
	for _, k := range []string{"appends", "rolls", "dropped", "opens", "reads", "dropped-reads", "records", "verifies"} {
		if v, ok := c[k]; ok {
			fmt.Fprintf(&b, "%s %d ", k, v)
		}
	}
	return strings.TrimSpace(b.String())
}

type stressChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout bytes.Buffer
	stderr bytes.Buffer
	role   string
}

func startStressChild(t *testing.T, role, dir string, seed uint64) *stressChild {
	t.Helper()
	c := &stressChild{role: role}
	c.cmd = testkit.Child("TestStressChild")
	c.cmd.Env = append(os.Environ(), "PAGELOG_STRESS_ROLE="+role, "PAGELOG_STRESS_DIR="+dir,
		"PAGELOG_STRESS_SEED="+strconv.FormatUint(seed, 10))
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// stop closes the child's stdin (its signal to finish), waits for it and
// returns its counts. A child that crashed or reported an error fails the
// test.
func (c *stressChild) stop(t *testing.T) stressCounts {
	t.Helper()
	_ = c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		t.Fatalf("%s did not stop in a minute:\n%s", c.role, c.stderr.String())
	}
	if err != nil {
		t.Fatalf("%s failed (%v):\n%s\n%s", c.role, err, c.stdout.String(), c.stderr.String())
	}
	counts := stressCounts{}
	sc := bufio.NewScanner(&c.stdout)
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			counts[name] += n
		}
	}
	return counts
}

// TestStressChild is the body of the processes of TestReadersBesideWriter.
func TestStressChild(t *testing.T) {
	role := os.Getenv("PAGELOG_STRESS_ROLE")
	if role == "" {
		t.Skip("run by TestReadersBesideWriter")
	}
	dir := os.Getenv("PAGELOG_STRESS_DIR")
	seed, _ := strconv.ParseUint(os.Getenv("PAGELOG_STRESS_SEED"), 10, 64)
	var stopped sync.WaitGroup
	stopped.Add(1)
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
		stopped.Done()
	}()
	var counts stressCounts
	var err error
	if role == "writer" {
		counts, err = stressWrite(dir, stop)
	} else {
		counts, err = stressRead(dir, seed, stop)
	}
	for k, v := range counts {
		fmt.Printf("%s %d\n", k, v)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s (seed %d): %v\n", role, seed, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func stressWrite(dir string, stop <-chan struct{}) (stressCounts, error) {
	c := stressCounts{}
	l, err := Open(dir, Options{SegmentBytes: stressSegmentBytes, IndexIntervalBytes: 512})
	if err != nil {
		return c, err
	}
	for {
		select {
		case <-stop:
			bases, _ := listSegments(dir)
			c["rolls"] = int64(len(bases)) + c["dropped"] - 1
			return c, l.Close()
		default:
		}
		for range stressDropEvery {
			off := l.Next()
			got, err := l.Append(stressBody(off))
			if err != nil {
				return c, err
			}
			if got != off {
				return c, fmt.Errorf("Append gave offset %d, Next said %d", got, off)
			}
			c["appends"]++
		}
		if next := l.Next(); next > stressKeep {
			n, err := l.DropBefore(next - stressKeep)
			if err != nil {
				return c, err
			}
			c["dropped"] += int64(n)
		}
	}
}

func stressRead(dir string, seed uint64, stop <-chan struct{}) (stressCounts, error) {
	c := stressCounts{}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for loop := 0; ; loop++ {
		select {
		case <-stop:
			return c, nil
		default:
		}
		if err := stressReadOnce(dir, rng, loop%4 == 3, c); err != nil {
			return c, fmt.Errorf("loop %d: %w", loop, err)
		}
	}
}

// stressReadOnce opens the log read-only and reads it every way.
func stressReadOnce(dir string, rng *rand.Rand, verify bool, c stressCounts) error {
	l, err := OpenReadOnly(dir, Options{})
	if err != nil {
		return fmt.Errorf("OpenReadOnly: %w", err)
	}
	defer l.Close()
	c["opens"]++
	rec := l.Recovery()
	if len(rec.Active.Damaged) > 0 || len(rec.Sealed) > 0 {
		return fmt.Errorf("a healthy log reported as damaged: %+v", rec)
	}
	first, next := l.First(), l.Next()
	if next <= first {
		return fmt.Errorf("empty view [%d, %d)", first, next)
	}
	for range 40 {
		// Now and then an offset below the view's first: dropped.
		off := first + rng.Uint64N(next-first)
		if rng.IntN(8) == 0 && first > 0 {
			off = first - 1 - rng.Uint64N(min(first, 500))
		}
		r, err := l.Read(off)
		if off < first {
			if !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("Read(%d) below First %d: %v, want ErrNotFound", off, first, err)
			}
			c["dropped-reads"]++
			continue
		}
		if err != nil {
			return fmt.Errorf("Read(%d) in [%d, %d): %w", off, first, next, err)
		}
		if !bytes.Equal(r.Body, stressBody(off)) {
			r.Release()
			return fmt.Errorf("Read(%d): body of %d bytes differs from the appended one", off, len(r.Body))
		}
		r.Release()
		c["reads"]++
	}
	from := first + rng.Uint64N(next-first)
	want := from
	for r, err := range l.Records(from) {
		if err != nil {
			return fmt.Errorf("Records(%d) at %d: %w", from, want, err)
		}
		if r.Offset != want || !bytes.Equal(r.Body, stressBody(r.Offset)) {
			return fmt.Errorf("Records(%d) yields %d (want %d) with a body of %d bytes", from, r.Offset, want, len(r.Body))
		}
		want++
		c["records"]++
		if want-from >= 300 {
			break
		}
	}
	if verify {
		v, err := l.Verify(nil)
		if err != nil {
			return fmt.Errorf("Verify: %w", err)
		}
		if !v.Healthy() {
			return fmt.Errorf("Verify beside the writer: not healthy: %+v", v)
		}
		c["verifies"]++
	}
	return nil
}
