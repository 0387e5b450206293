package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// TestQueueCLIDelay: send --delay hides the messages until their due time
// (stored in whole milliseconds, rounded up); receive --wait gets them
// then. The delay, 2 s, leaves the three commands before the check time
// to run on a slow machine (under qemu they took more than 300 ms).
func TestQueueCLIDelay(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	sent := time.Now()
	mustRun(t, "later\n", "queue", "send", "--dir", dir, "--delay", "2s")
	mustRun(t, "now\n", "queue", "send", "--dir", dir)
	if r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "5"); r.stdout != "1\tnow\n" {
		t.Fatalf("receive before the due time printed %q", r.stdout)
	}
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "1")
	var due time.Time
	queue.Messages(dir, func(m queue.Stored) bool {
		if m.Offset == 0 {
			due = m.Due
		}
		return true
	})
	if due.Before(sent.Add(2*time.Second)) || due.After(time.Now().Add(2*time.Second)) || due.UnixMilli()*1e6 != due.UnixNano() {
		t.Fatalf("due time %v, sent at %v with a 2 s delay", due, sent)
	}
	r := mustRun(t, "", "queue", "receive", "--dir", dir, "--wait", "10s")
	if r.stdout != "0\tlater\n" || time.Now().Before(due) {
		t.Fatalf("receive --wait printed %q at %v (due %v)", r.stdout, time.Now(), due)
	}
}

// TestQueueCLIGroupsAndDedup: --group hands out one message of a group at
// a time; --dedup-id sends the first line only and prints its offset for
// each.
func TestQueueCLIGroupsAndDedup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	offs := parseOffsets(t, mustRun(t, "a1\na2\n", "queue", "send", "--dir", dir, "--group", "a").stdout)
	wantSequence(t, offs, 0, 2)
	mustRun(t, "b1\n", "queue", "send", "--dir", dir, "--group", "b")
	r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "5", "--json")
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var o map[string]any
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("receive --json line %q: %v", line, err)
		}
		got = append(got, o)
	}
	if len(got) != 2 || got[0]["body"] != "a1" || got[0]["group"] != "a" || got[1]["body"] != "b1" || got[1]["group"] != "b" {
		t.Fatalf("receive of two groups printed %q", r.stdout)
	}
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "0")
	if r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "5"); r.stdout != "1\ta2\n2\tb1\n" {
		t.Fatalf("receive after deleting a1 printed %q", r.stdout)
	}

	d := filepath.Join(t.TempDir(), "d")
	out := mustRun(t, "first\nsecond\nthird\n", "queue", "send", "--dir", d, "--dedup-id", "order-17").stdout
	if out != "0\n0\n0\n" {
		t.Fatalf("send --dedup-id printed %q, want the first offset three times", out)
	}
	if out := mustRun(t, "again\n", "queue", "send", "--dir", d, "--dedup-id", "order-17").stdout; out != "0\n" {
		t.Fatalf("send --dedup-id in a new process printed %q", out)
	}
	wantStats(t, d, map[string]string{"end": "1", "messages": "1"})
}

// TestQueueCLIDeadLetters: receive --max-receives counts receives across
// processes; a message received that many times moves to <dir>.dead,
// which `queue dead` lists (text and --json) and `queue redrive` moves
// back.
func TestQueueCLIDeadLetters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "poison\nfine\n", "queue", "send", "--dir", dir, "--group", "g")
	if r := mustRun(t, "", "queue", "dead", "--dir", dir); r.stdout != "" {
		t.Fatalf("dead before any dead letter printed %q", r.stdout)
	}
	for range 2 {
		if r := mustRun(t, "", "queue", "receive", "--dir", dir, "--max-receives", "2"); r.stdout != "0\tpoison\n" {
			t.Fatalf("receive printed %q", r.stdout)
		}
	}
	wantStats(t, dir, map[string]string{"receive_records": "2", "dead_letters": "0"})
	// The third process finds 0 used up: it moves it, and 1 comes next.
	if r := mustRun(t, "", "queue", "receive", "--dir", dir, "--max-receives", "2", "--wait", "10s"); r.stdout != "1\tfine\n" {
		t.Fatalf("receive after the poison used its receives printed %q", r.stdout)
	}
	wantStats(t, dir, map[string]string{"dead_letters": "1", "head": "1"})
	if r := mustRun(t, "", "queue", "dead", "--dir", dir); r.stdout != "0\tpoison\n" {
		t.Fatalf("dead printed %q", r.stdout)
	}
	var o map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "queue", "dead", "--dir", dir, "--json").stdout), &o); err != nil {
		t.Fatal(err)
	}
	if o["offset"] != 0.0 || o["origin"] != 0.0 || o["receives"] != 2.0 || o["group"] != "g" || o["body"] != "poison" {
		t.Fatalf("dead --json: %v", o)
	}
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "1")
	if r := mustRun(t, "", "queue", "redrive", "--dir", dir, "-n", "5"); r.stdout != "redrove 1\n" {
		t.Fatalf("redrive printed %q", r.stdout)
	}
	if r := mustRun(t, "", "queue", "dead", "--dir", dir); r.stdout != "" {
		t.Fatalf("dead after the redrive printed %q", r.stdout)
	}
	if r := mustRun(t, "", "queue", "receive", "--dir", dir, "--max-receives", "2", "--json"); !strings.Contains(r.stdout, `"receives":1`) ||
		!strings.Contains(r.stdout, `"offset":2`) || !strings.Contains(r.stdout, `"body":"poison"`) {
		t.Fatalf("receive of the redriven message printed %q", r.stdout)
	}
	if r := mustRun(t, "", "queue", "redrive", "--dir", dir); r.stdout != "redrove 0\n" {
		t.Fatalf("redrive of nothing printed %q", r.stdout)
	}
}

// TestQueueCLIFeatureFlagsRefused: bad values of the new flags are usage
// errors that create nothing; dead and redrive refuse what is no queue.
func TestQueueCLIFeatureFlagsRefused(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "q")
	for _, args := range [][]string{
		{"--delay", "-1s"}, {"--delay", "5"}, {"--group", ""}, {"--group", strings.Repeat("g", 129)},
		{"--dedup-id", ""}, {"--dedup-id", strings.Repeat("d", 129)}, {"--delay", "9000h"},
	} {
		r := runCmd(t, "x\n", append([]string{"queue", "send", "--dir", dir}, args...)...)
		if r.code != 2 {
			t.Errorf("send %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if names := listNames(t, root); len(names) != 0 {
		t.Fatalf("refused sends created %v", names)
	}
	if r := runCmd(t, "", "queue", "receive", "--dir", dir, "--max-receives", "-1"); r.code != 2 {
		t.Errorf("receive --max-receives -1: exit %d", r.code)
	}
	for _, cmd := range []string{"dead", "redrive"} {
		if r := runCmd(t, "", "queue", cmd, "--dir", root); r.code != 1 || !strings.Contains(r.stderr, "not a queue") {
			t.Errorf("%s of a directory without a queue: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
	}
	if r := runCmd(t, "", "queue", "redrive", "--dir", root, "-n", "-2"); r.code != 2 {
		t.Errorf("redrive -n -2: exit %d", r.code)
	}
	help := mustRun(t, "", "queue", "help").stdout
	for _, want := range []string{"dead", "redrive", "<dir>.dead"} {
		if !strings.Contains(help, want) {
			t.Errorf("queue help does not mention %q:\n%s", want, help)
		}
	}
	send := runCmd(t, "", "queue", "send", "--help")
	for _, want := range []string{"--delay", "--group", "--dedup-id"} {
		if !strings.Contains(send.stdout+send.stderr, want) {
			t.Errorf("queue send --help does not mention %s", want)
		}
	}
}
