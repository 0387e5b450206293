package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var besideRuns = flag.Int("beside.runs", 15, "verify, dump and read runs of TestCommandsBesideWriter (make crash-long: 1000)")

// besideLine is the line appended as record off: its text follows from the
// offset, so that `pagelog read` can be checked.
func besideLine(off int) string {
	return fmt.Sprintf("record %d %s", off, strings.Repeat(string(rune('a'+off%26)), 150+off%97))
}

// TestCommandsBesideWriter runs `pagelog append` with 64 KiB segments fed
// about 60,000 lines a second (some 200 rolls a second), and beside it
// `pagelog verify`, `pagelog dump --from 100` and `pagelog read` in a loop:
// every run must exit 0, verify must call the log healthy, and read must
// print exactly the line appended. Every few seconds the writer starts
// over in a new directory, so that the runs stay short however many there
// are (make crash-long runs 1,000 of each).
func TestCommandsBesideWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary for seconds")
	}
	bin := pagelogBinary(t)
	runs := map[string]int{}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d of %s beside the writer: %v\nstdout (end): %s\nstderr: %s", runs[name]+1, name, err, tail(stdout.String()), stderr.String())
		}
		runs[name]++
		return stdout.String()
	}
	var w *besideWriter
	var appended, epochs int64
	for i := range *besideRuns {
		if w == nil || time.Since(w.began) > 3*time.Second {
			if w != nil {
				appended += w.stop(t)
			}
			w = startBesideWriter(t, bin, t.TempDir())
			epochs++
		}
		dir := w.dir
		if rep := run("verify", "verify", "--dir", dir); !strings.HasSuffix(rep, "healthy\n") || strings.Contains(rep, "NOT healthy") {
			t.Fatalf("verify %d beside the writer: %s", i, rep)
		}
		run("dump", "dump", "--dir", dir, "--from", "100")
		off := int(w.acked.Load()) - 1 - i%500
		if got := run("read", "read", "--dir", dir, "--offset", strconv.Itoa(off)); got != besideLine(off) {
			t.Fatalf("read --offset %d: %q, want %q", off, got, besideLine(off))
		}
	}
	appended += w.stop(t)
	rolls := appended * int64(len(besideLine(0))+16+50) / 65536
	t.Logf("%d verify, %d dump and %d read runs, all exit 0, beside %d writers that appended %d records (about %d rolls)",
		runs["verify"], runs["dump"], runs["read"], epochs, appended, rolls)
}

// besideWriter is a `pagelog append` process fed lines at a steady rate.
type besideWriter struct {
	dir   string
	cmd   *exec.Cmd
	in    io.WriteCloser
	err   bytes.Buffer
	acked atomic.Int64 // offsets below it were acknowledged
	quit  chan struct{}
	fed   sync.WaitGroup
	began time.Time
}

const besideRate = 100000 // lines a second

func startBesideWriter(t *testing.T, bin, dir string) *besideWriter {
	t.Helper()
	w := &besideWriter{dir: dir, quit: make(chan struct{}), began: time.Now()}
	w.cmd = exec.Command(bin, "append", "--dir", dir, "--segment-bytes", "65536")
	var err error
	if w.in, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = &w.err
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill() })
	go func() {
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if off, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
				w.acked.Store(int64(off) + 1)
			}
		}
	}()
	w.fed.Add(1)
	go func() {
		defer w.fed.Done()
		bw := bufio.NewWriterSize(w.in, 64<<10)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for off := 0; ; {
			select {
			case <-w.quit:
				_ = bw.Flush()
				_ = w.in.Close()
				return
			case <-tick.C:
			}
			for range besideRate / 100 {
				if _, err := io.WriteString(bw, besideLine(off)+"\n"); err != nil {
					return
				}
				off++
			}
			_ = bw.Flush()
		}
	}()
	for deadline := time.Now().Add(time.Minute); w.acked.Load() < 1000; {
		if time.Now().After(deadline) {
			t.Fatalf("append acknowledged %d records in a minute: %s", w.acked.Load(), w.err.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return w
}

// stop ends the input and waits for the process; it returns how many
// records were appended.
func (w *besideWriter) stop(t *testing.T) int64 {
	t.Helper()
	close(w.quit)
	w.fed.Wait()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("append: %v\n%s", err, w.err.String())
	}
	return w.acked.Load()
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
