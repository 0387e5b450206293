package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	for deadline := time.Now().Add(10 * time.Second); ; {
		if r := runCmd(t, "", "tail", "--dir", dir); r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer made no log in 10s")
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
