package main

import (
	"os"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	r := mustRun(t, "", "demo", "--messages", "2000", "--size", "100")
	for _, prefix := range []string{"pagelog demo: 2000 messages of 100 bytes", "phase ", "append     ", "read       ",
		"reopen  open ", "verify        2000 ", "store   10000 queues created in one store", "store   with every queue open: ",
		"store   reopened in ", "total "} {
		if !hasLinePrefix(r.stdout, prefix) {
			t.Errorf("summary lacks a line starting %q:\n%s", prefix, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "healthy") {
		t.Errorf("summary does not say healthy:\n%s", r.stdout)
	}
	for _, phase := range []string{"append", "read", "reopen", "verify", "store"} {
		if !strings.Contains(r.stderr, phase) {
			t.Errorf("no progress line for %s:\n%s", phase, r.stderr)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the temporary directory was not removed: %v", left)
	}
}

func TestDemoKeepsDir(t *testing.T) {
	dir := t.TempDir() + "/log"
	mustRun(t, "", "demo", "--dir", dir, "--messages", "300", "--size", "5")
	v := mustRun(t, "", "verify", "--dir", dir)
	if !strings.Contains(v.stdout, "300 verified") {
		t.Fatalf("verify after demo --dir:\n%s", v.stdout)
	}
	if got := mustRun(t, "", "read", "--dir", dir, "--offset", "258").stdout; got != "\x00\x00\x00\x01\x02" {
		t.Fatalf("message 258 is %q", got)
	}
}

func TestDemoNoSpace(t *testing.T) {
	r := runCmd(t, "", "demo", "--dir", t.TempDir(), "--messages", "1000000000", "--size", "1000000")
	if r.code != 1 || !strings.Contains(r.stderr, "not enough disk space") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	oneLine(t, "stderr", r.stderr)
}

func hasLinePrefix(s, prefix string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
