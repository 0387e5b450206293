//go:build linux

package engine

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

var followDuration = flag.Duration("follow.duration", 3*time.Second, "how long TestFollowProcesses kills and restarts its processes")

// followSize is the body size of the record at off in the process tests:
// mostly around 1 KiB, some tiny, some up to 9 KiB (a record may span
// pages and cross the 4 KiB reads of a follower).
func followSize(off uint64) int {
	x := (off + 7) * 0x9E3779B97F4A7C15
	switch x >> 60 {
	case 0:
		return int(x >> 8 % 16)
	case 1:
		return 4000 + int(x>>8%5000)
	}
	return 900 + int(x>>8%300)
}

// TestFollowProcesses runs a writer process and follower processes, each
// reading through a cursor of its own, and kills them with SIGKILL at
// random moments: the writer (it is started again: its open recovers the
// log, cutting a torn tail the followers never served) and the followers
// (started again through their cursors). The writer rolls every few
// hundred records. Every follower checks every record it gets: its offset
// is the one after the last and its body is the one written at that offset
// (a record is never served before it is whole). Each follower also notes
// in a journal where each run started and each position it committed
// (noted just before the Commit): a restart must begin at the position the
// last Commit left, never past it (a skipped record) nor before it, so
// that across the restarts every offset is read, in order, exactly once
// up to the last commit. At the end every follower reads up to the
// writer's last record and commits there.
func TestFollowProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes for seconds")
	}
	seed := crashSeedFor(t)
	rng := crashRand(seed, 7)
	dir := t.TempDir()
	writer := startFollowChild(t, "writer", dir, "")
	// Let the log exist before the followers come.
	for deadline := time.Now().Add(time.Minute); ; {
		if ok, _ := IsLog(dir); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log after a minute: %s", writer.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	names := []string{"f0", "f1", "f2"}
	followers := make([]*followChild, len(names))
	for i, n := range names {
		followers[i] = startFollowChild(t, "follower", dir, n)
	}
	kills := map[string]int{}
	// Kill for at least followDuration, and on until enough happened to
	// test anything (a loaded machine starts processes slowly): a writer
	// killed and 1,000 records, for at most two minutes.
	start := time.Now()
	enough := func() bool {
		return time.Since(start) >= *followDuration && kills["writer"] > 0 && followAppended(t, dir) >= 1000
	}
	for !enough() && time.Since(start) < *followDuration+2*time.Minute {
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		switch k := rng.IntN(3); k {
		case 0:
			writer.kill(t)
			writer = startFollowChild(t, "writer", dir, "")
			kills["writer"]++
		default:
			i := rng.IntN(len(followers))
			followers[i].kill(t)
			followers[i] = startFollowChild(t, "follower", dir, names[i])
			kills["follower"]++
		}
	}
	writer.finish(t, "")
	l := mustOpenRO(t, dir, Options{})
	last := l.Next()
	segs := len(*l.segs.Load())
	_ = l.Close()
	for i, f := range followers {
		f.finish(t, strconv.FormatUint(last, 10))
		checkFollowJournal(t, followJournal(dir, names[i]), last)
	}
	infos, err := Cursors(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range infos {
		if c.Position != last || c.Lag != 0 {
			t.Fatalf("cursor %s at %d (lag %d), want %d", c.Name, c.Position, c.Lag, last)
		}
	}
	t.Logf("seed %d: %d records in %d segments; %d writer kills, %d follower kills; every follower read every record in order",
		seed, last, segs, kills["writer"], kills["follower"])
	if kills["writer"] == 0 || last < 1000 {
		t.Fatalf("too little happened to test anything")
	}
}

// followJournal is the journal of the follower name of the log in dir.
func followJournal(dir, name string) string {
	return filepath.Join(filepath.Dir(dir), "follow-"+name+".journal")
}

// checkFollowJournal checks the runs of one follower (see
// TestFollowProcesses): its first run starts at 0; each later run at the
// position the last Commit left, which is the last one noted, or the one
// before it when the kill came between the note and the Commit; the last
// run commits at last.
func checkFollowJournal(t *testing.T, path string, last uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	committed := []uint64{0} // the positions the last Commit may have left, newest last
	runs := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var what string
		var pos uint64
		if _, err := fmt.Sscanf(line, "%s %d", &what, &pos); err != nil {
			// A kill in the middle of a note's write: only the last line.
			continue
		}
		switch what {
		case "start":
			runs++
			if n := len(committed); pos != committed[n-1] && (n < 2 || pos != committed[n-2]) {
				t.Fatalf("%s, line %d: run %d starts at %d; the last commits were at %v: records skipped or read twice",
					filepath.Base(path), i+1, runs, pos, committed[max(0, n-2):])
			}
			committed = []uint64{pos}
		case "commit":
			committed = append(committed, pos)
		}
	}
	if got := committed[len(committed)-1]; got != last || runs == 0 {
		t.Fatalf("%s: %d runs, the last committed at %d, want %d", filepath.Base(path), runs, got, last)
	}
}

// followAppended is how many records the log in dir holds now, as a
// reader in another process sees it.
func followAppended(t *testing.T, dir string) uint64 {
	t.Helper()
	l, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly(%s): %v", dir, err)
	}
	defer l.Close()
	return l.Next()
}

type followChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	done   chan error
}

func startFollowChild(t *testing.T, role, dir, name string) *followChild {
	t.Helper()
	c := &followChild{done: make(chan error, 1)}
	c.cmd = testkit.Child("TestFollowChild")
	c.cmd.Env = append(os.Environ(), "PAGELOG_FOLLOW_JOURNAL="+followJournal(dir, name),
		"PAGELOG_FOLLOW_ROLE="+role, "PAGELOG_FOLLOW_DIR="+dir, "PAGELOG_FOLLOW_NAME="+name)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// kill kills the child with SIGKILL; a child that had already failed fails
// the test.
func (c *followChild) kill(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		t.Fatalf("%s exited before it was killed: %v\n%s", c.cmd.Env[len(c.cmd.Env)-3:], err, c.stderr.String())
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// finish tells the child to end (a writer stops appending and closes; a
// follower reads up to the offset given, then closes) and waits for it.
func (c *followChild) finish(t *testing.T, msg string) {
	t.Helper()
	fmt.Fprintln(c.stdin, msg)
	_ = c.stdin.Close()
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.cmd.Env[len(c.cmd.Env)-3:], err, c.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not finish in 60s\n%s", c.cmd.Env[len(c.cmd.Env)-3:], c.stderr.String())
	}
}

// TestFollowChild is the body of TestFollowProcesses' processes.
func TestFollowChild(t *testing.T) {
	role := os.Getenv("PAGELOG_FOLLOW_ROLE")
	if role == "" {
		t.Skip("a child of TestFollowProcesses")
	}
	dir, name := os.Getenv("PAGELOG_FOLLOW_DIR"), os.Getenv("PAGELOG_FOLLOW_NAME")
	stop := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		stop <- strings.TrimSpace(line)
	}()
	var err error
	if role == "writer" {
		err = followWriter(dir, stop)
	} else {
		err = followReader(dir, name, stop)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", role, name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func followWriter(dir string, stop chan string) error {
	l, err := Open(dir, Options{SegmentBytes: 256 << 10})
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return l.Close()
		default:
		}
		off := l.Next()
		if i%10 == 9 {
			n := 1 + i%5
			bodies := make([][]byte, n)
			for j := range bodies {
				bodies[j] = testBody(off+uint64(j), followSize(off+uint64(j)))
			}
			if _, _, err := l.AppendBatch(bodies, nil); err != nil {
				return err
			}
		} else if _, err := l.Append(testBody(off, followSize(off))); err != nil {
			return err
		}
		if i%64 == 63 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

func followReader(dir, name string, stop chan string) error {
	c, err := OpenCursor(dir, name, CursorOptions{})
	if err != nil {
		return err
	}
	defer c.Close()
	if n := c.Notes(); len(n) > 0 {
		return fmt.Errorf("cursor notes: %v", n)
	}
	journal, err := os.OpenFile(os.Getenv("PAGELOG_FOLLOW_JOURNAL"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer journal.Close()
	// note writes one line of the journal in one write.
	note := func(what string, pos uint64) error {
		_, err := journal.WriteString(fmt.Sprintf("%s %d\n", what, pos))
		return err
	}
	commit := func(pos uint64) error {
		if err := note("commit", pos); err != nil {
			return err
		}
		return c.Commit()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var target uint64 = maxOffset
	var mu sync.Mutex
	go func() {
		s := <-stop
		n, err := strconv.ParseUint(s, 10, 64)
		mu.Lock()
		if err == nil {
			target = n
		}
		mu.Unlock()
		cancel()
	}()
	want := c.Position()
	if err := note("start", want); err != nil {
		return err
	}
	for i := 1; ; i++ {
		mu.Lock()
		done := want >= target
		mu.Unlock()
		if done {
			return commit(want)
		}
		rctx := ctx
		if ctx.Err() != nil {
			rctx = context.Background() // told to finish: read up to the target
		}
		rec, err := c.Next(rctx)
		if err == context.Canceled {
			continue
		}
		if err != nil {
			return fmt.Errorf("Next at %d: %w", want, err)
		}
		if rec.Offset != want {
			return fmt.Errorf("got offset %d, want %d", rec.Offset, want)
		}
		if !bytes.Equal(rec.Body, testBody(want, followSize(want))) {
			return fmt.Errorf("offset %d: body of %d bytes is not the one written", want, len(rec.Body))
		}
		rec.Release()
		want++
		if i%37 == 0 {
			if err := commit(want); err != nil {
				return err
			}
		}
	}
}
