package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// TestQueueCLIOnlySendCreates: receive, delete and stats refuse a
// directory that holds no queue (a user's notes, an empty directory, a
// plain log) and create nothing in it; send refuses a directory holding
// other files, and a path whose parent does not exist.
func TestQueueCLIOnlySendCreates(t *testing.T) {
	notes := t.TempDir()
	if err := os.WriteFile(filepath.Join(notes, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	plainLog := t.TempDir()
	mustRun(t, "a record\n", "append", "--dir", plainLog)
	for _, dir := range []string{notes, t.TempDir(), plainLog} {
		before := listNames(t, dir)
		for _, args := range [][]string{{"receive"}, {"delete", "--offset", "0"}, {"stats"}} {
			r := runCmd(t, "", append([]string{"queue", args[0], "--dir", dir}, args[1:]...)...)
			if r.code != 1 || !strings.Contains(r.stderr, "not a queue") {
				t.Errorf("queue %s on %v: exit %d, stderr %q", args[0], before, r.code, r.stderr)
			}
			oneLine(t, "stderr", r.stderr)
		}
		if after := listNames(t, dir); strings.Join(after, ",") != strings.Join(before, ",") {
			t.Fatalf("the refused commands changed %v into %v", before, after)
		}
	}
	if r := runCmd(t, "x\n", "queue", "send", "--dir", notes); r.code != 1 || !strings.Contains(r.stderr, "no queue") {
		t.Errorf("send into a directory of other files: exit %d, stderr %q", r.code, r.stderr)
	}
	deep := filepath.Join(t.TempDir(), "no", "such", "q")
	if r := runCmd(t, "x\n", "queue", "send", "--dir", deep); r.code != 1 || !strings.Contains(r.stderr, "parent directory does not exist") {
		t.Errorf("send into a path without its parents: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Dir(deep)); err == nil {
		t.Error("send created the missing parents")
	}
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestQueueCLIReceiveOutput: a body with a newline or a tab is one line,
// escaped; --json gives the exact bytes back; each message is printed as
// it is received, not when the command exits.
func TestQueueCLIReceiveOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "plain\n", "queue", "send", "--dir", dir)
	// A body with a newline cannot be sent as a line: send it through the
	// API-level encoding the CLI reads back.
	sendBodies(t, dir, "two\nlines", "a\ttab \\ backslash", "\x00\xff bytes")
	r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "4")
	want := "0\tplain\n1\ttwo\\nlines\n2\ta\\ttab \\\\ backslash\n3\t\\x00\\xff bytes\n"
	if r.stdout != want {
		t.Fatalf("receive printed %q, want %q", r.stdout, want)
	}
	r = mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "4", "--json")
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var o map[string]any
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		got = append(got, o)
	}
	if len(got) != 4 || got[1]["body"] != "two\nlines" || got[3]["body_base64"] != "AP8gYnl0ZXM=" || got[0]["receives"] != 1.0 {
		t.Fatalf("--json: %v", got)
	}

	// Streaming: the first message is printed before the command ends.
	bin := pagelogBinary(t)
	cmd := exec.Command(bin, "queue", "receive", "--dir", dir, "--count", "2", "--wait", "30s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "0\tplain\n" {
			t.Fatalf("first line %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("receive held the first message back until it exits")
	}
}

// sendBodies sends raw bodies through the queue API (the CLI's send takes
// lines).
func sendBodies(t *testing.T, dir string, bodies ...string) {
	t.Helper()
	q, err := openQueue(dir, false, queueOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		if _, err := q.Send([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestQueueCLIBesideAnOwner: while another process has the queue open,
// stats reads it (without the lock), and the commands that write say who
// holds it.
func TestQueueCLIBesideAnOwner(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "a\nb\nc\n", "queue", "send", "--dir", dir)
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "1")
	bin := pagelogBinary(t)
	owner := exec.Command(bin, "queue", "receive", "--dir", dir, "--count", "10", "--wait", "60s")
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer owner.Process.Kill()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // it holds the queue now
		t.Fatal(err)
	}
	wantStats(t, dir, map[string]string{"end": "3", "messages": "2", "deleted": "1"})
	r := runCmd(t, "", "queue", "delete", "--dir", dir, "--offset", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "open in another process") {
		t.Fatalf("delete beside the owner: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmd(t, "", "queue", "stats", "--dir", dir, "--json")
	var o map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &o) != nil || o["messages"] != 2.0 {
		t.Fatalf("stats --json beside the owner: exit %d, %q", r.code, r.stdout)
	}
}

// TestQueueCLIMessages: what the commands say when given wrong input.
func TestQueueCLIMessages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	long := strings.Repeat("x", 2<<20)
	r := runCmd(t, "one\ntwo\n"+long+"\nfour\n", "queue", "send", "--dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "line 3") || !strings.Contains(r.stderr, "nor any line after it (2 sent)") {
		t.Fatalf("send of an over-limit line: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmd(t, "", "queue", "receive", "--dir", dir, "--wait", "5")
	if r.code != 2 || !strings.Contains(r.stderr, "with its unit") {
		t.Fatalf("--wait 5: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "queue.head"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "", "queue", "stats", "--dir", dir).stdout
	if !strings.Contains(out, `queue.head is damaged`) || strings.Contains(out, "corrupt record") {
		t.Fatalf("stats with a damaged queue.head:\n%s", out)
	}
	r = runCmd(t, "", "verify", "--dir", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "queue checkpoint_error: pagelog: queue.head is damaged") || !strings.Contains(r.stdout, "queue NOT healthy") {
		t.Fatalf("verify of a queue with a damaged queue.head: exit %d\n%s", r.code, r.stdout)
	}
}

func queueOptions() queue.Options { return queue.Options{} }

// TestQueueSendStripsCarriageReturns: CRLF input sends the same messages
// as LF input: the carriage return before each newline (and at the end of
// a last line without one) is not part of the body.
func TestQueueSendStripsCarriageReturns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "one\r\ntwo\r\n\r\nin\rside\r\nlast\r", "queue", "send", "--dir", dir)
	r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", "5", "--json")
	var got []string
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var o struct{ Body string }
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		got = append(got, o.Body)
	}
	want := []string{"one", "two", "", "in\rside", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("CRLF lines sent as %q, want %q", got, want)
	}
}
