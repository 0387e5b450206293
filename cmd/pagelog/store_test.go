package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/queue"
)

// storeRun runs the real binary and fails the test unless it exits want.
func storeRun(t *testing.T, want int, stdin string, args ...string) cmdResult {
	t.Helper()
	r := hqExec(t, pagelogBinary(t), stdin, args...)
	if r.code != want {
		t.Fatalf("pagelog %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

func TestQueueCommandsWorkOnAQueueOfAStore(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	jobs := []string{"--store", st, "--queue", "jobs"}
	q := func(cmd string, args ...string) []string {
		return append(append([]string{"queue", cmd}, jobs...), args...)
	}
	if got := storeRun(t, 0, "a\nb\nc\n", q("send")...).stdout; got != "0\n1\n2\n" {
		t.Fatalf("send printed %q", got)
	}
	storeRun(t, 0, "x\n", "queue", "send", "--store", st, "--queue", "other")
	if got := storeRun(t, 0, "", q("receive", "--count", "2")...).stdout; got != "0\ta\n1\tb\n" {
		t.Fatalf("receive printed %q", got)
	}
	storeRun(t, 0, "", q("delete", "--offset", "1")...)
	stats := storeRun(t, 0, "", q("stats")...).stdout
	for _, line := range []string{"end 3\n", "messages 2\n", "deleted 1\n", "delete_records 1\n"} {
		if !strings.Contains(stats, line) {
			t.Fatalf("stats lacks %q:\n%s", line, stats)
		}
	}
	// Received once each with --max-receives 1: the next receive moves
	// them to jobs.dead.
	storeRun(t, 0, "", q("receive", "--count", "2", "--max-receives", "1")...)
	storeRun(t, 1, "", q("receive", "--max-receives", "1")...)
	if got := storeRun(t, 0, "", q("dead")...).stdout; got != "0\ta\n1\tc\n" {
		t.Fatalf("dead printed %q", got)
	}
	if got := storeRun(t, 0, "", q("redrive")...).stdout; got != "redrove 2\n" {
		t.Fatalf("redrive printed %q", got)
	}
	if got := storeRun(t, 0, "", q("receive", "--count", "5")...).stdout; got != "3\ta\n4\tc\n" {
		t.Fatalf("receive after redrive printed %q", got)
	}
	if got := storeRun(t, 0, "", "queue", "receive", "--store", st, "--queue", "other").stdout; got != "0\tx\n" {
		t.Fatalf("the other queue printed %q", got)
	}
}

func TestQueueCommandsOnAStoreCreateOnlyWithSend(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	storeRun(t, 0, "x\n", "queue", "send", "--store", st, "--queue", "a")
	for _, args := range [][]string{{"receive"}, {"delete", "--offset", "0"}, {"stats"}, {"dead"}, {"redrive"}} {
		r := storeRun(t, 1, "", append([]string{"queue", args[0], "--store", st, "--queue", "b"}, args[1:]...)...)
		if !strings.Contains(r.stderr, "no such queue") {
			t.Errorf("queue %s of a queue the store lacks: stderr %q", args[0], r.stderr)
		}
	}
	r := storeRun(t, 0, "", "stats", "--dir", st, "--json")
	var o struct {
		Queues int `json:"queues"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || o.Queues != 1 {
		t.Fatalf("the refused commands made queues: %v %s", err, r.stdout)
	}
	if r := storeRun(t, 1, "", "queue", "receive", "--store", t.TempDir(), "--queue", "a"); !strings.Contains(r.stderr, "not a store") {
		t.Fatalf("receive from a directory without a store: %q", r.stderr)
	}
}

func TestQueueStoreFlagsAreRefusedWithDirOrAlone(t *testing.T) {
	for _, args := range [][]string{
		{"--dir", "d", "--store", "s", "--queue", "q"},
		{"--store", "s"},
		{"--queue", "q"},
		{"--store", "s", "--queue", "a/b"},
	} {
		r := storeRun(t, 2, "", append([]string{"queue", "stats"}, args...)...)
		if !strings.Contains(r.stderr, "Usage:") {
			t.Errorf("%v: stderr %q", args, r.stderr)
		}
	}
}

func TestStatsOfAStoreShowsTotalsAndTheDeepestQueues(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	s, err := queue.OpenStore(st, queue.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := queue.StoreStatsDeepest + 2
	for i := range n {
		q, err := s.Queue(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		for range i {
			if _, err := q.Send([]byte("m")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Beside the store's owner: stats takes no lock.
	screen := storeRun(t, 0, "", "stats", "--dir", st).stdout
	for _, want := range []string{"(store)", "queues       12", "messages     66", "deepest queues (10 of 12", "          11  \"l\"\n"} {
		if !strings.Contains(screen, want) {
			t.Fatalf("screen lacks %q:\n%s", want, screen)
		}
	}
	if strings.Contains(screen, "\"a\"\n") {
		t.Fatalf("the screen lists more than the deepest queues:\n%s", screen)
	}
	var o struct {
		Kind     string `json:"kind"`
		Queues   int    `json:"queues"`
		Messages uint64 `json:"messages"`
		Depths   []struct {
			Name     string `json:"name"`
			Messages uint64 `json:"messages"`
		} `json:"queue_depths"`
	}
	if err := json.Unmarshal([]byte(storeRun(t, 0, "", "stats", "--dir", st, "--json").stdout), &o); err != nil {
		t.Fatal(err)
	}
	if o.Kind != "store" || o.Queues != n || o.Messages != 66 || len(o.Depths) != n || o.Depths[0].Name != "l" || o.Depths[n-1].Name != "a" {
		t.Fatalf("json: %+v", o)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDumpAndRecoverUnderstandAStore(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	storeRun(t, 0, "a\nb\n", "queue", "send", "--store", st, "--queue", "jobs")
	storeRun(t, 0, "c\n", "queue", "send", "--store", st, "--queue", "mail")
	v := storeRun(t, 0, "", "verify", "--dir", st).stdout
	for _, want := range []string{"== log messages/\n", "records: 3 verified, 0 damaged", "store queues: 2\n",
		"store messages: 3\n", "store damaged records: 0\n", "store open: 2 queues opened", "store healthy\n"} {
		if !strings.Contains(v, want) {
			t.Fatalf("verify lacks %q:\n%s", want, v)
		}
	}
	d := storeRun(t, 0, "", "dump", "--dir", st).stdout
	// A store's ids start at a random one (FORMAT.md, Store files).
	if m := regexp.MustCompile(`queue (\d+) "jobs"\nqueue (\d+) "mail"\n`).FindStringSubmatch(d); m == nil {
		t.Fatalf("dump lacks the queues:\n%s", d)
	} else if a, b := parseID(t, m[1]), parseID(t, m[2]); b != a+1 {
		t.Fatalf("dump names the queues %d and %d, want ids given one after the other:\n%s", a, b, d)
	}
	if want := "log messages first 0 next 3 segments 1"; !strings.Contains(d, want) {
		t.Fatalf("dump lacks %q:\n%s", want, d)
	}
	storeRun(t, 2, "", "dump", "--dir", st, "--from", "1")
	r := storeRun(t, 0, "", "recover", "--dir", st).stdout
	for _, want := range []string{"== log names/\n", "== store\n", "store queues: 2\n", "store messages: 3\n"} {
		if !strings.Contains(r, want) {
			t.Fatalf("recover lacks %q:\n%s", want, r)
		}
	}
	// Beside the store's owner verify checks the logs and skips the opens.
	s, err := queue.OpenStore(st, queue.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := storeRun(t, 0, "", "verify", "--dir", st).stdout; !strings.Contains(v, "store open: skipped") {
		t.Fatalf("verify beside the owner:\n%s", v)
	}
}

func parseID(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
