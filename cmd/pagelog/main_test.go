package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestUsage(t *testing.T) {
	r := mustRun(t, "", "help")
	for _, c := range []string{"append", "read", "dump", "verify", "demo", "help"} {
		if !hasLinePrefix(r.stdout, "  "+c+" ") {
			t.Errorf("usage lacks a line for %s:\n%s", c, r.stdout)
		}
	}
	if r := mustRun(t, "", "help", "dump"); !strings.Contains(r.stdout, "--json") {
		t.Errorf("help dump:\n%s", r.stdout)
	}
	r = runCmd(t, "")
	if r.code != 2 || !strings.Contains(r.stderr, "Usage: pagelog") || r.stdout != "" {
		t.Fatalf("no arguments: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"frobnicate"},
		{"append"},
		{"append", "--dir", dir, "--sync", "sometimes"},
		{"append", "--dir", dir, "--segment-bytes", "-1"},
		{"append", "--dir", dir, "--segment-bytes", "ten"},
		{"append", "--dir", dir, "--bogus"},
		{"append", "--dir", dir, "extra"},
		{"read", "--dir", dir},
		{"read", "--offset", "0"},
		{"read", "--dir", dir, "--offset", "-1"},
		{"dump"},
		{"dump", "--dir", dir, "--from", "x"},
		{"dump", "--dir", dir, "--json=maybe"},
		{"verify"},
		{"verify", "--dir", dir, "more"},
		{"demo", "--messages", "0"},
		{"demo", "--size", "-3"},
		{"help", "nope"},
	} {
		r := runCmd(t, "", args...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2", args, r.code)
			continue
		}
		if r.stdout != "" {
			t.Errorf("%q: stdout %q", args, r.stdout)
		}
		first, rest, _ := strings.Cut(r.stderr, "\n")
		if first == "" || strings.HasPrefix(first, "Usage:") || !strings.Contains(rest, "Usage: pagelog") {
			t.Errorf("%q: want a one-line error then the usage, got:\n%s", args, r.stderr)
		}
	}
	// Nothing was created by the refused commands.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands created %v", entries)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

// TestMain removes the directory of the binary built by pagelogBinary.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// pagelogBinary builds the command once, for the tests that exec it.
func pagelogBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "pagelog-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "pagelog")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err, string(out)}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

// TestBinaryAppendPipe drives the real binary through pipes: each offset
// must arrive before the next line is written, so stdout is flushed per
// message.
func TestBinaryAppendPipe(t *testing.T) {
	bin := pagelogBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "append", "--dir", dir, "--segment-bytes", "200")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // the test failed before Wait
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	out := bufio.NewReader(stdoutPipe)
	msgs := messages("pipe", 30)
	for i, m := range msgs {
		if _, err := io.WriteString(stdin, m+"\n"); err != nil {
			t.Fatal(err)
		}
		line := readLineTimeout(t, out, 10*time.Second)
		if want := itoa(i) + "\n"; line != want {
			t.Fatalf("message %d: got offset line %q, want %q", i, line, want)
		}
	}
	stdin.Close()
	if rest, _ := io.ReadAll(out); len(rest) != 0 {
		t.Fatalf("extra output %q", rest)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("append: %v; stderr %q", err, stderr.String())
	}

	for i, m := range msgs {
		got, err := exec.Command(bin, "read", "--dir", dir, "--offset", itoa(i)).Output()
		if err != nil || string(got) != m {
			t.Fatalf("read %d: %q, %v; want %q", i, got, err, m)
		}
	}
}

func TestBinaryExitStatus(t *testing.T) {
	bin := pagelogBinary(t)
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"help"}, 0},
		{[]string{"read", "--dir", dir}, 2},
		{[]string{"read", "--dir", dir, "--offset", "0"}, 1},
		{[]string{"verify", "--dir", dir}, 1}, // no log there
	} {
		cmd := exec.Command(bin, c.args...)
		err := cmd.Run()
		if got := cmd.ProcessState.ExitCode(); got != c.code {
			t.Errorf("pagelog %q: exit %d (%v), want %d", c.args, got, err, c.code)
		}
	}
}

// readLineTimeout reads one line, failing the test if none comes in time
// (an offset held back in a buffer would hang the writer's loop).
func readLineTimeout(t *testing.T, r *bufio.Reader, d time.Duration) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := r.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case x := <-ch:
		if x.err != nil {
			t.Fatalf("reading an offset: %v", x.err)
		}
		return x.s
	case <-time.After(d):
		t.Fatal("no offset line within", d)
		return ""
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
