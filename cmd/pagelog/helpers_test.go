package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// result is what one in-process run of a subcommand produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs `pagelog args...` in-process with stdin as standard input.
func runCmd(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// mustRun runs the command and fails the test unless it exits 0.
func mustRun(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	r := runCmd(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("pagelog %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// appendMessages pipes the messages, one per line, into `pagelog append`
// and returns the offsets it printed.
func appendMessages(t *testing.T, dir string, msgs []string, extra ...string) []uint64 {
	t.Helper()
	args := append([]string{"append", "--dir", dir}, extra...)
	r := mustRun(t, strings.Join(msgs, "\n")+"\n", args...)
	return parseOffsets(t, r.stdout)
}

func parseOffsets(t *testing.T, out string) []uint64 {
	t.Helper()
	var offs []uint64
	for _, f := range strings.SplitAfter(out, "\n") {
		if f == "" {
			continue
		}
		if !strings.HasSuffix(f, "\n") {
			t.Fatalf("offset line %q does not end in a newline", f)
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(f, "\n"), 10, 64)
		if err != nil {
			t.Fatalf("offset line %q: %v", f, err)
		}
		offs = append(offs, n)
	}
	return offs
}

// wantSequence checks that offs are first, first+1, ..., first+n-1.
func wantSequence(t *testing.T, offs []uint64, first uint64, n int) {
	t.Helper()
	if len(offs) != n {
		t.Fatalf("got %d offsets %v, want %d", len(offs), offs, n)
	}
	for i, o := range offs {
		if o != first+uint64(i) {
			t.Fatalf("offset %d is %d, want %d (all: %v)", i, o, first+uint64(i), offs)
		}
	}
}

// messages returns n distinct messages; some have spaces, a '\r' at the
// end, or are empty.
func messages(prefix string, n int) []string {
	msgs := make([]string, n)
	for i := range msgs {
		msgs[i] = prefix + " message " + strconv.Itoa(i) + strings.Repeat("x", i%17)
		switch i % 7 {
		case 3:
			msgs[i] += "\r"
		case 5:
			msgs[i] = ""
		}
	}
	return msgs
}

// oneLine checks that s is exactly one line ending in a newline.
func oneLine(t *testing.T, what, s string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Fatalf("%s: want exactly one line, got %q", what, s)
	}
}
