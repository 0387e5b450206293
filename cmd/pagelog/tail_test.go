package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

func TestTail(t *testing.T) {
	dir := t.TempDir()
	msgs := []string{"zero", "one\twith a tab", "two \\ back", "three"}
	appendMessages(t, dir, msgs)
	r := mustRun(t, "", "tail", "--dir", dir)
	if want := "zero\none\\twith a tab\ntwo \\\\ back\nthree\n"; r.stdout != want {
		t.Fatalf("tail printed %q, want %q", r.stdout, want)
	}
	if r := mustRun(t, "", "tail", "--dir", dir, "--from", "2"); r.stdout != "two \\\\ back\nthree\n" {
		t.Fatalf("tail --from 2 printed %q", r.stdout)
	}
	if r := mustRun(t, "", "tail", "--dir", dir, "--from", "end"); r.stdout != "" {
		t.Fatalf("tail --from end printed %q", r.stdout)
	}
	r = mustRun(t, "", "tail", "--dir", dir, "--json", "--from", "1")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("tail --json printed %q", r.stdout)
	}
	var o struct {
		Offset uint64 `json:"offset"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &o); err != nil || o.Offset != 2 || o.Body != "two \\ back" {
		t.Fatalf("tail --json line %q: %+v %v", lines[1], o, err)
	}

	// Through a cursor: what was printed is committed.
	if r := mustRun(t, "", "tail", "--dir", dir, "--cursor", "c1"); r.stdout != "zero\none\\twith a tab\ntwo \\\\ back\nthree\n" {
		t.Fatalf("tail --cursor printed %q", r.stdout)
	}
	appendMessages(t, dir, []string{"four"})
	if r := mustRun(t, "", "tail", "--dir", dir, "--cursor", "c1"); r.stdout != "four\n" {
		t.Fatalf("tail --cursor after one more append printed %q, want only it", r.stdout)
	}
	r = mustRun(t, "", "cursors", "--dir", dir)
	if !strings.HasPrefix(r.stdout, "NAME") || !strings.Contains(r.stdout, "c1") {
		t.Fatalf("cursors printed %q", r.stdout)
	}
	f := strings.Fields(strings.Split(r.stdout, "\n")[1])
	if f[0] != "c1" || f[1] != "5" || f[2] != "0" {
		t.Fatalf("cursors line %q, want c1 5 0", f)
	}
	mustRun(t, "", "tail", "--dir", dir, "--cursor", "c2")
	r = mustRun(t, "", "cursors", "--dir", dir, "--json")
	if n := strings.Count(r.stdout, "\n"); n != 2 || !strings.Contains(r.stdout, `"name":"c2"`) {
		t.Fatalf("cursors --json printed %q", r.stdout)
	}

	for _, args := range [][]string{
		{"tail"},
		{"tail", "--dir", dir, "--from", "x"},
		{"tail", "--dir", dir, "--from", "1", "--cursor", "a"},
		{"cursors"},
	} {
		if r := runCmd(t, "", args...); r.code != 2 {
			t.Fatalf("pagelog %s: exit %d, want 2 (%s)", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if r := runCmd(t, "", "tail", "--dir", t.TempDir()); r.code != 1 || !strings.Contains(r.stderr, "no log") {
		t.Fatalf("tail of an empty directory: exit %d, %q", r.code, r.stderr)
	}
	if r := runCmd(t, "", "tail", "--dir", dir, "--cursor", "../x"); r.code != 1 || !strings.Contains(r.stderr, "bad cursor name") {
		t.Fatalf("tail --cursor ../x: exit %d, %q", r.code, r.stderr)
	}
}

// TestTailFollowProcesses runs `pagelog append` fed lines at a steady rate
// (small segments: it rolls often) and `pagelog tail --follow --cursor`
// beside it, kills the tail with SIGKILL now and then and starts it again:
// every line comes out in order, and a restart goes on from the last
// commit (lines after it may come again, none is skipped).
func TestTailFollowProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	bin := pagelogBinary(t)
	dir := t.TempDir()
	w := exec.Command(bin, "append", "--dir", dir, "--segment-bytes", "16384")
	in, err := w.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
	const total = 6000
	line := func(i int) string { return fmt.Sprintf("line %d %s", i, strings.Repeat("x", i%97)) }
	go func() {
		bw := bufio.NewWriter(in)
		for i := 0; i < total; i++ {
			fmt.Fprintln(bw, line(i))
			if i%50 == 49 {
				_ = bw.Flush()
				time.Sleep(time.Millisecond)
			}
		}
		_ = bw.Flush()
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		if r := runCmd(t, "", "tail", "--dir", dir); r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer made no log in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := 0 // the next line not yet seen
	restarts := 0
	for want < total {
		tail := exec.Command(bin, "tail", "--dir", dir, "--follow", "--cursor", "c")
		out, err := tail.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		tail.Stderr = &stderr
		if err := tail.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		prev := -1 // the line printed before, in this run
		limit := want + 700 + restarts*311
		killed := false
		for want < total && sc.Scan() {
			if want >= limit && !killed {
				// Killed at a random moment: what it printed before
				// the kill is still read (it was printed, and maybe
				// committed), then the pipe ends.
				_ = tail.Process.Signal(syscall.SIGKILL)
				killed = true
			}
			got := sc.Text()
			if killed && prev >= 0 && got != line(prev+1) && strings.HasPrefix(line(prev+1), got) {
				break // the last line, torn by the kill
			}
			f := strings.Fields(got)
			i, err := 0, error(nil)
			if len(f) > 1 {
				i, err = strconv.Atoi(f[1])
			}
			if len(f) < 2 || err != nil || got != line(i) {
				t.Fatalf("tail printed %q", got)
			}
			switch {
			case prev < 0 && i > want:
				t.Fatalf("restart %d: the first line is %d, but %d was never seen: skipped", restarts, i, want)
			case prev >= 0 && i != prev+1:
				t.Fatalf("line %d after line %d", i, prev)
			}
			if i == want {
				want++
			}
			prev = i
		}
		_ = tail.Process.Signal(syscall.SIGKILL)
		_, _ = io.Copy(io.Discard, out) // a torn last line, if any
		_ = tail.Wait()
		if strings.TrimSpace(stderr.String()) != "" {
			t.Fatalf("tail wrote to stderr: %s", stderr.String())
		}
		restarts++
		if restarts > 100 {
			t.Fatalf("no progress: %d lines seen", want)
		}
	}
	t.Logf("%d lines followed across %d kills of the tail", want, restarts-1)
}

// logFrom makes a log in dir that begins at offset first (as a raftstore
// log does) and appends bodies; the writer is returned open.
func logFrom(t *testing.T, dir string, first uint64, bodies ...string) *engine.Log {
	t.Helper()
	l, err := engine.Open(dir, engine.Options{FirstOffset: first})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	for _, b := range bodies {
		if _, err := l.Append([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// returnsWithin runs f and fails the test when it has not returned in 10
// seconds.
func returnsWithin[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return in a minute", what)
		panic("unreachable")
	}
}

// runWithin runs `pagelog args...` in-process and fails the test when it
// has not returned in 10 seconds.
func runWithin(t *testing.T, args ...string) result {
	t.Helper()
	return returnsWithin(t, "pagelog "+strings.Join(args, " "), func() result {
		var out, errOut bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errOut)
		return result{code: code, stdout: out.String(), stderr: errOut.String()}
	})
}

func TestTailBelowFirstOffsetReportsTrimmed(t *testing.T) {
	dir := t.TempDir()
	l := logFrom(t, dir, 1000)
	// An empty log: the offsets below its first are reported, nothing
	// printed.
	r := runWithin(t, "tail", "--dir", dir, "--from", "0")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "offsets [0, 1000) lie below the log's first offset 1000") {
		t.Fatalf("tail --from 0 of an empty log beginning at 1000: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, b := range []string{"a", "b"} {
		if _, err := l.Append([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	r = runWithin(t, "tail", "--dir", dir, "--from", "0")
	if r.code != 1 || r.stdout != "a\nb\n" || !strings.Contains(r.stderr, "0 records lost") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("tail --from 0: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runWithin(t, "tail", "--dir", dir, "--from", "999", "--json")
	if lines := strings.Split(r.stdout, "\n"); r.code != 1 || len(lines) != 4 || !strings.Contains(lines[0], `"offset":999`) ||
		!strings.Contains(lines[0], `"error":"offset dropped from the front of the log: offsets [999, 1000)`) || !strings.Contains(lines[1], `"offset":1000`) {
		t.Fatalf("tail --from 999 --json: exit %d, stdout %q", r.code, r.stdout)
	}

	// A cursor committed below the first record.
	c, err := engine.OpenCursor(dir, "low", engine.CursorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Seek(5); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	r = runWithin(t, "tail", "--dir", dir, "--cursor", "low")
	if r.code != 1 || r.stdout != "a\nb\n" || !strings.Contains(r.stderr, "[5, 1000)") {
		t.Fatalf("tail --cursor at 5 of a log beginning at 1000: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// lines sends the lines of r on the returned channel, and closes it at
// the end.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// wantLines reads the lines want from ch, in order, in 10 seconds.
func wantLines(t *testing.T, ch <-chan string, want ...string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for _, w := range want {
		select {
		case got, ok := <-ch:
			if !ok || got != w {
				t.Fatalf("tail printed %q (ended: %v), want %q", got, !ok, w)
			}
		case <-timeout:
			t.Fatalf("tail did not print %q in a minute", w)
		}
	}
}

// startTail runs the pagelog binary's tail with args, its standard output
// as lines on a channel, its standard error in a buffer (read it once the
// command has ended). Skipped with -short.
func startTail(t *testing.T, args ...string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs processes")
	}
	cmd := exec.Command(pagelogBinary(t), append([]string{"tail"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, lines(out), stderr
}

// interrupt sends SIGINT to the command and returns its exit code, failing
// the test when it has not exited in 10 seconds.
func interrupt(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(time.Minute):
		t.Fatal("tail did not end in a minute after SIGINT")
		return -1
	}
}

func TestTailFollowBelowFirstOffsetEndsOnInterrupt(t *testing.T) {
	dir := t.TempDir()
	l := logFrom(t, dir, 1000, "a", "b")
	cmd, out, stderr := startTail(t, "--dir", dir, "--from", "0", "--follow")
	wantLines(t, out, "a", "b")
	if _, err := l.Append([]byte("c")); err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "c")
	if code := interrupt(t, cmd); code != 1 {
		t.Fatalf("tail --follow ended with exit %d after SIGINT, want 1 (it reported a range): %s", code, stderr)
	}
	if s := stderr.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "[0, 1000)") {
		t.Fatalf("tail --from 0 --follow of a log beginning at 1000 wrote %q, want one report of [0, 1000)", s)
	}
}

// waitSleeper waits until a reader sleeps on dir's log.notify (its
// sleepers word, FORMAT.md, is set): the reader has looked at the log and
// found nothing to read. Linux only (where readers sleep on a futex);
// elsewhere it returns at once.
func waitSleeper(t *testing.T, dir string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	for deadline := time.Now().Add(time.Minute); ; {
		b, err := os.ReadFile(filepath.Join(dir, "log.notify"))
		if err == nil && len(b) >= 68 && binary.BigEndian.Uint32(b[64:]) != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no reader slept on log.notify in a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTailFollowFromPastTheEndWaitsForIt(t *testing.T) {
	dir := t.TempDir()
	l := logFrom(t, dir, 0, "r0", "r1")
	cmd, out, stderr := startTail(t, "--dir", dir, "--from", "5", "--follow")
	waitSleeper(t, dir)
	for i := 2; i < 5; i++ {
		if _, err := l.Append([]byte(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 5; i < 8; i++ {
		if _, err := l.Append([]byte(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	wantLines(t, out, "r5", "r6", "r7")
	if code := interrupt(t, cmd); code != 0 || stderr.Len() != 0 {
		t.Fatalf("tail --from 5 --follow: exit %d, stderr %q", code, stderr)
	}
}

func TestTailCursorHeldElsewhereNamesIt(t *testing.T) {
	dir := t.TempDir()
	logFrom(t, dir, 0, "a")
	c, err := engine.OpenCursor(dir, "billing", engine.CursorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := runCmd(t, "", "tail", "--dir", dir, "--cursor", "billing")
	if r.code != 1 || !strings.Contains(r.stderr, `cursor "billing"`) || !strings.Contains(r.stderr, "held by another holder") || strings.Contains(r.stderr, "writer") {
		t.Fatalf("tail --cursor of a held cursor: exit %d, %q", r.code, r.stderr)
	}
}

// cutOnFirstWrite is a standard output that runs cut before its first
// write goes through.
type cutOnFirstWrite struct {
	bytes.Buffer
	cut func()
}

func (w *cutOnFirstWrite) Write(p []byte) (int, error) {
	if w.cut != nil {
		w.cut()
		w.cut = nil
	}
	return w.Buffer.Write(p)
}

func TestTailStopsAtACutBelowItsEnd(t *testing.T) {
	l := logFrom(t, t.TempDir(), 0)
	const n = 2 * flushEvery
	for i := 0; i < n; i++ {
		if _, err := l.Append([]byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The first flush of what tail printed (after flushEvery records)
	// cuts the log below the record tail reads next. The tailer reads the
	// writer's own log, which sees the cut at once (a log opened read-only
	// sees it within a moment: the same path, at a time a test cannot
	// choose).
	const at = 100
	out := &cutOnFirstWrite{cut: func() {
		if err := l.Truncate(at); err != nil {
			t.Error(err)
		}
	}}
	var stderr bytes.Buffer
	tl := &tailer{log: l, w: bufio.NewWriterSize(out, 64<<10), stderr: &stderr}
	err := returnsWithin(t, "tail without --follow", func() error { return tl.run(context.Background(), false) })
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if err != nil || !tl.bad || len(got) != flushEvery-1 || !strings.Contains(stderr.String(), fmt.Sprintf("the log was cut at %d", at)) {
		t.Fatalf("tail of a log cut at %d while it printed: %v, %d lines, stderr %q", at, err, len(got), stderr.String())
	}
}

// A link in place of a cursor's file is never written through by
// tail --cursor, and cursors lists it as damaged instead of hiding it.
func TestTailCursorRefusesALinkAndCursorsListsIt(t *testing.T) {
	dir := t.TempDir()
	appendMessages(t, dir, []string{"zero", "one"})
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "cursors"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "cursors", "c")); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t, "", "tail", "--dir", dir, "--cursor", "c"); r.code != 1 || !strings.Contains(r.stderr, "symbolic link") {
		t.Fatalf("tail --cursor through a link: exit %d, %q", r.code, r.stderr)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("the file outside reads %q, %v: written through the link", b, err)
	}
	r := mustRun(t, "", "cursors", "--dir", dir)
	if !strings.Contains(r.stdout, "c ") || !strings.Contains(r.stdout, "symbolic link") {
		t.Fatalf("cursors printed %q, want c listed as a symbolic link", r.stdout)
	}
}
