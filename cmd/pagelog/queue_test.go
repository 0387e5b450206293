package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// statsOf runs `pagelog queue stats` and returns its key-value lines.
func statsOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := mustRun(t, "", "queue", "stats", "--dir", dir).stdout
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("stats line %q is not key value", line)
		}
		kv[k] = v
	}
	return kv
}

func wantStats(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	got := statsOf(t, dir)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("stats %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestQueueCLISendReceiveDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	offs := parseOffsets(t, mustRun(t, "first\nsecond\nthird with spaces\nlast", "queue", "send", "--dir", dir).stdout)
	wantSequence(t, offs, 0, 4)
	wantStats(t, dir, map[string]string{"end": "4", "head": "0", "messages": "4", "head_from": `"checkpoint"`})

	r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "2", "--visibility", "1m")
	if r.stdout != "0\tfirst\n1\tsecond\n" {
		t.Fatalf("receive --count 2 printed %q", r.stdout)
	}
	// The receiving process is gone: nothing it received is hidden now.
	r = mustRun(t, "", "queue", "receive", "--dir", dir)
	if r.stdout != "0\tfirst\n" {
		t.Fatalf("receive in a new process printed %q", r.stdout)
	}
	if r := mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "0"); r.stdout != "deleted 0\n" {
		t.Fatalf("delete printed %q", r.stdout)
	}
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "2") // never received: deleted all the same
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "2") // twice is fine
	wantStats(t, dir, map[string]string{"end": "4", "head": "1", "messages": "2", "delete_records": "2"})

	r = mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "10")
	if r.stdout != "1\tsecond\n3\tlast\n" {
		t.Fatalf("receive after deletes printed %q", r.stdout)
	}
	// The messages are a log: read works on a queue.
	if got := mustRun(t, "", "read", "--dir", dir, "--offset", "2").stdout; got != "third with spaces" {
		t.Fatalf("read --offset 2: %q", got)
	}
}

func TestQueueCLIEmptyAndWait(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "only\n", "queue", "send", "--dir", dir)
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "0")
	for _, extra := range [][]string{nil, {"--wait", "20ms"}} {
		r := runCmd(t, "", append([]string{"queue", "receive", "--dir", dir}, extra...)...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "no message ready") {
			t.Fatalf("receive %v on an empty queue: exit %d, stdout %q, stderr %q", extra, r.code, r.stdout, r.stderr)
		}
		oneLine(t, "stderr", r.stderr)
	}
	wantStats(t, dir, map[string]string{"end": "1", "head": "1", "messages": "0"})
	r := runCmd(t, "", "queue", "delete", "--dir", dir, "--offset", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "beyond the end") {
		t.Fatalf("delete beyond the end: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestQueueCLISyncAlways(t *testing.T) {
	dir := t.TempDir()
	offs := parseOffsets(t, mustRun(t, "a\nb\n", "queue", "send", "--dir", dir, "--sync", "always").stdout)
	wantSequence(t, offs, 0, 2)
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "1", "--sync", "always")
	if r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "5"); r.stdout != "0\ta\n" {
		t.Fatalf("receive printed %q", r.stdout)
	}
}

func TestQueueCLIBadArguments(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, args := range [][]string{
		{"queue"},
		{"queue", "peek"},
		{"queue", "send"},
		{"queue", "send", "--dir", dir, "--sync", "sometimes"},
		{"queue", "receive", "--dir", dir, "--count", "0"},
		{"queue", "receive", "--dir", dir, "--visibility", "0s"},
		{"queue", "receive", "--dir", dir, "--wait", "-1s"},
		{"queue", "delete", "--dir", dir},
		{"queue", "stats"},
		{"queue", "stats", "--dir", dir, "extra"},
	} {
		r := runCmd(t, "", args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "Usage: pagelog queue") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands created %v", entries)
	}
	for _, args := range [][]string{{"receive"}, {"delete", "--offset", "0"}, {"stats"}} {
		cmd := args[0]
		r := runCmd(t, "", append([]string{"queue", cmd, "--dir", missing}, args[1:]...)...)
		if r.code != 1 {
			t.Errorf("queue %s on a missing directory: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatalf("queue %s created the missing directory", cmd)
		}
	}
	if r := mustRun(t, "", "help", "queue"); !strings.Contains(r.stdout, "receive") || !strings.Contains(r.stdout, "Deadlines live") {
		t.Errorf("help queue:\n%s", r.stdout)
	}
	if r := mustRun(t, "", "queue", "delete", "--help"); !strings.Contains(r.stderr+r.stdout, "Queue.Discard") {
		t.Errorf("queue delete --help:\n%s%s", r.stdout, r.stderr)
	}
}

// The demo's queue phase: a child process killed with SIGKILL half-way,
// the queue reopened, every message deleted and the queue empty.
func TestDemoQueuePhase(t *testing.T) {
	dir := t.TempDir()
	r := mustRun(t, "", "demo", "--dir", dir, "--messages", "3000", "--size", "64")
	for _, want := range []string{
		"queue   first process: ", "then killed with SIGKILL",
		"queue   reopened in ", "delete records replayed",
		"queue   redeliveries: ", "all 3000 messages deleted, queue empty (head = end = 3000)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
	if !hasLinePrefix(r.stdout, "queue   ") || !strings.Contains(r.stderr, "queue") {
		t.Errorf("no queue figures or progress:\n%s\n%s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "queue-demo.marks")); err == nil {
		t.Error("the marks file was left behind")
	}
	// The queue is kept with --dir, empty.
	wantStats(t, filepath.Join(dir, "queue"), map[string]string{"end": "3000", "head": "3000", "messages": "0"})
}
