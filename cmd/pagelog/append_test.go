package main

import (
	"strconv"
	"strings"
	"testing"
)

func TestAppendThenRead(t *testing.T) {
	dir := t.TempDir()
	msgs := messages("first", 40)
	msgs[7] = strings.Repeat("long line longer than a bufio buffer ", 200<<10/37) // ~200 KiB
	msgs[8] = "tab\there, quotes \" and a backslash \\"
	offs := appendMessages(t, dir, msgs)
	wantSequence(t, offs, 0, len(msgs))
	for i, m := range msgs {
		r := mustRun(t, "", "read", "--dir", dir, "--offset", strconv.Itoa(i))
		if r.stdout != m {
			t.Fatalf("read --offset %d: got %d bytes %.40q, want %d bytes %.40q", i, len(r.stdout), r.stdout, len(m), m)
		}
		if r.stderr != "" {
			t.Fatalf("read --offset %d: stderr %q", i, r.stderr)
		}
	}
}

func TestAppendContinues(t *testing.T) {
	dir := t.TempDir()
	first := messages("a", 25)
	wantSequence(t, appendMessages(t, dir, first), 0, len(first))
	second := messages("b", 10)
	wantSequence(t, appendMessages(t, dir, second, "--sync", "always"), uint64(len(first)), len(second))
	r := mustRun(t, "", "read", "--dir", dir, "--offset", strconv.Itoa(len(first)))
	if r.stdout != second[0] {
		t.Fatalf("got %q, want %q", r.stdout, second[0])
	}
}

func TestAppendLastLineWithoutNewline(t *testing.T) {
	dir := t.TempDir()
	r := mustRun(t, "one\n\ntwo\r\nthree", "append", "--dir", dir, "--sync", "interval")
	wantSequence(t, parseOffsets(t, r.stdout), 0, 4)
	for i, want := range []string{"one", "", "two\r", "three"} {
		got := mustRun(t, "", "read", "--dir", dir, "--offset", strconv.Itoa(i)).stdout
		if got != want {
			t.Fatalf("offset %d: got %q, want %q", i, got, want)
		}
	}
	// Empty input appends nothing and prints nothing.
	if r := mustRun(t, "", "append", "--dir", dir); r.stdout != "" {
		t.Fatalf("empty input printed %q", r.stdout)
	}
}

func TestAppendTooLarge(t *testing.T) {
	dir := t.TempDir()
	in := "small\n" + strings.Repeat("z", 1<<20+1) + "\nnever\n"
	r := runCmd(t, in, "append", "--dir", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", r.code, r.stderr)
	}
	oneLine(t, "stderr", r.stderr)
	if r.stdout != "0\n" {
		t.Fatalf("stdout %q, want the first offset only", r.stdout)
	}
}
