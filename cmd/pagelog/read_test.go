package main

import (
	"strings"
	"testing"
)

func TestReadMissingOffset(t *testing.T) {
	dir := t.TempDir()
	appendMessages(t, dir, messages("m", 5))
	for _, off := range []string{"5", "1000", "18446744073709551615"} {
		r := runCmd(t, "", "read", "--dir", dir, "--offset", off)
		if r.code != 1 {
			t.Fatalf("read --offset %s: exit %d, want 1", off, r.code)
		}
		if r.stdout != "" {
			t.Fatalf("read --offset %s: stdout %q, want nothing", off, r.stdout)
		}
		oneLine(t, "stderr", r.stderr)
		if !strings.Contains(r.stderr, "not found") {
			t.Errorf("stderr %q does not say the record was not found", r.stderr)
		}
	}
}

func TestReadMissingDir(t *testing.T) {
	r := runCmd(t, "", "read", "--dir", t.TempDir()+"/nope", "--offset", "0")
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("exit %d stdout %q", r.code, r.stdout)
	}
	oneLine(t, "stderr", r.stderr)
}
