package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// statsJSONOf runs `pagelog stats --json` with args and decodes each line.
func statsJSONOf(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	r := mustRun(t, "", append([]string{"stats", "--json"}, args...)...)
	var objs []map[string]any
	for _, line := range strings.SplitAfter(r.stdout, "\n") {
		if line == "" {
			continue
		}
		var o map[string]any
		if err := json.Unmarshal([]byte(line), &o); err != nil || !strings.HasSuffix(line, "\n") {
			t.Fatalf("stats --json line %q: %v", line, err)
		}
		objs = append(objs, o)
	}
	return objs
}

func wantJSON(t *testing.T, o map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got, ok := o[k]; !ok || fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("%s = %v (present %v), want %v; all: %v", k, got, ok, v, o)
		}
	}
}

// logOf makes a log in dir of n records of body bytes, in segments of
// segBytes.
func logOf(t *testing.T, dir string, n, body int, segBytes int64) {
	t.Helper()
	l, err := engine.Open(dir, engine.Options{SegmentBytes: segBytes})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := l.Append(bytes.Repeat([]byte("b"), body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStatsLog(t *testing.T) {
	dir := t.TempDir()
	// 10 records of 116 bytes in segments of 512: 4 per segment, 3 segments.
	logOf(t, dir, 10, 100, 512)
	objs := statsJSONOf(t, "--dir", dir)
	if len(objs) != 1 {
		t.Fatalf("%d objects, want 1", len(objs))
	}
	o := objs[0]
	wantJSON(t, o, map[string]any{"kind": "log", "dir": dir, "first": 0, "next": 10, "segments": 3, "bytes": 10 * 116})
	for _, k := range []string{"depth", "appends_per_second", "oldest_age_seconds"} {
		if _, ok := o[k]; ok {
			t.Errorf("a log's stats have %s: %v", k, o)
		}
	}
	if disk := o["disk_bytes"].(float64); disk < 10*116 {
		t.Errorf("disk_bytes %v below the bytes of the records", disk)
	}
	if at, err := time.Parse(time.RFC3339Nano, o["time"].(string)); err != nil || time.Since(at) > time.Minute {
		t.Errorf("time %v: %v", o["time"], err)
	}

	out := mustRun(t, "", "stats", "--dir", dir).stdout
	for _, want := range []string{"(log)", "\nfirst        0 ", "next         10\n", "segments     3 ", "log bytes    1.16 kB\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats screen lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "depth") || strings.Contains(out, "appends/s") {
		t.Errorf("a single read of a log shows queue figures or rates:\n%s", out)
	}
}

func TestStatsQueue(t *testing.T) {
	clk := queue.NewManualClock(time.Now())
	dir := filepath.Join(t.TempDir(), "jobs")
	q, err := queue.Open(dir, queue.Options{Clock: clk, MaxReceives: 1, Visibility: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// 12 messages of 1 KiB: the time index has entries, so the oldest
	// message's age is known.
	for i := range 12 {
		if _, err := q.Send([]byte(fmt.Sprintf("%1024d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		m, err := q.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Offset < 2 {
			if err := q.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Message 2 was received once and not deleted: with MaxReceives 1 it
	// moves to the dead letters when its deadline passes.
	clk.Advance(2 * time.Second)
	deadline := time.Now().Add(time.Minute)
	for q.Stats().DeadLetters != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter: %+v", q.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	// Read beside the open queue: no lock is taken.
	o := statsJSONOf(t, "--dir", dir)[0]
	wantJSON(t, o, map[string]any{
		"kind": "queue", "next": 12, "end": 12, "head": 3, "depth": 9, "lost": 0,
		"dead_letters": 1, "checkpoint_error": nil,
	})
	if age, ok := o["oldest_age_seconds"].(float64); !ok || age <= 0 || age > 60 {
		t.Errorf("oldest_age_seconds %v", o["oldest_age_seconds"])
	}
	out := mustRun(t, "", "stats", "--dir", dir).stdout
	for _, want := range []string{"(queue)", "depth        9 ", "head         3 ", "dead letters 1 ", "checkpoint   "} {
		if !strings.Contains(out, want) {
			t.Errorf("stats screen lacks %q:\n%s", want, out)
		}
	}
}

// A queue too small for the time index to date its messages says so: null
// in JSON, "unknown" on the screen; an empty one has no oldest message.
func TestStatsQueueAgeUnknown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "a\nb\n", "queue", "send", "--dir", dir)
	if o := statsJSONOf(t, "--dir", dir)[0]; o["oldest_age_seconds"] != nil || o["depth"] != 2.0 {
		t.Errorf("small queue: %v", o)
	}
	if out := mustRun(t, "", "stats", "--dir", dir).stdout; !strings.Contains(out, "oldest       unknown\n") {
		t.Errorf("small queue screen:\n%s", out)
	}
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "0")
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "1")
	if o := statsJSONOf(t, "--dir", dir)[0]; o["oldest_age_seconds"] != 0.0 || o["depth"] != 0.0 {
		t.Errorf("empty queue: %v", o)
	}
}

func TestStatsWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "a\nb\n", "queue", "send", "--dir", dir)
	objs := statsJSONOf(t, "--dir", dir, "--watch", "--interval", "20ms", "--count", "3")
	if len(objs) != 3 {
		t.Fatalf("%d objects, want 3", len(objs))
	}
	for i, o := range objs {
		_, hasRates := o["appends_per_second"]
		if hasRates != (i > 0) {
			t.Errorf("object %d: rates present %v: %v", i, hasRates, o)
		}
		if i > 0 {
			wantJSON(t, o, map[string]any{"appends_per_second": 0, "bytes_per_second": 0, "depth_per_second": 0, "deleted_per_second": 0})
		}
	}
	// Not a terminal: screens one after another, rates shown from the
	// second.
	out := mustRun(t, "", "stats", "--dir", dir, "--watch", "--interval", "20ms", "--count", "2").stdout
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escape sequences written to a file:\n%q", out)
	}
	screens := strings.Split(out, "\n\npagelog stats ")
	if len(screens) != 2 ||
		!strings.Contains(screens[0], "appends/s    -   ") || !strings.Contains(screens[0], "depth/s      -   ") ||
		!strings.Contains(screens[1], "appends/s    0.0 ") || !strings.Contains(screens[1], "depth/s      +0.0 ") {
		t.Errorf("watch screens:\n%s", out)
	}
}

func TestStatsRates(t *testing.T) {
	at := time.Now()
	prev := &dirStats{At: at, Log: engine.LogStats{Next: 100, Bytes: 1000}, Queue: &queueStats{Status: queue.Status{End: 100, Messages: 10}}}
	cur := &dirStats{At: at.Add(2 * time.Second), Log: engine.LogStats{Next: 300, Bytes: 500}, Queue: &queueStats{Status: queue.Status{End: 300, Messages: 14}}}
	r := ratesBetween(prev, cur)
	if r.Appends != 100 || r.Bytes != -250 || *r.Depth != 2 || *r.Deleted != 98 {
		t.Errorf("rates %+v depth %v deleted %v", r, *r.Depth, *r.Deleted)
	}
	var b bytes.Buffer
	writeStatsScreen(&b, cur, r, true)
	for _, want := range []string{"appends/s    100.0 ", "bytes/s      -250 B/s\n", "depth/s      +2.0 ", "deleted/s    98.0\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("screen lacks %q:\n%s", want, b.String())
		}
	}
	// A log cut back (Truncate) or replaced: no negative appends.
	cur.Log.Next = 50
	if r := ratesBetween(prev, cur); r.Appends != 0 {
		t.Errorf("appends/s %v after next went back", r.Appends)
	}
	cur.At = prev.At
	if r := ratesBetween(prev, cur); r != nil {
		t.Errorf("rates over no time: %+v", r)
	}
}

// A watch ends when interrupted; a read that fails after the first is
// reported and the watch goes on.
func TestStatsWatchInterruptAndErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	logOf(t, dir, 3, 10, 0)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan error)
	go func() {
		done <- watchStats(ctx, dir, 5*time.Millisecond, 0, &statsWriter{out: &out, json: true, watch: true}, &errOut)
	}()
	waitUntil(t, func() bool { return strings.Count(out.String(), "\n") >= 2 })
	moved := dir + ".away"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return strings.Contains(errOut.String(), "pagelog stats: ") })
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(out.String(), "\n")
	waitUntil(t, func() bool { return strings.Count(out.String(), "\n") > lines })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The first read failing is the command's error.
	r := runCmd(t, "", "stats", "--dir", moved, "--watch")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "pagelog stats: ") {
		t.Errorf("stats of a missing directory: %+v", r)
	}
}

func TestStatsArguments(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats"}, 2, "missing --dir"},
		{[]string{"stats", "--dir", dir, "extra"}, 2, "unexpected argument"},
		{[]string{"stats", "--dir", dir, "--watch", "--interval", "0s"}, 2, "--interval 0s"},
		{[]string{"stats", "--dir", dir, "--watch", "--count", "-1"}, 2, "--count -1"},
		{[]string{"stats", "--dir", dir, "--count", "2"}, 2, "go with --watch"},
		{[]string{"stats", "--dir", dir}, 1, "no log"},
		{[]string{"stats", "--dir", filepath.Join(dir, "missing")}, 1, "missing"},
	} {
		r := runCmd(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("stats of an empty directory wrote %d files", len(entries))
	}
}

// Reads beside a writer see offsets that only grow and never pass the
// writer's by more than the record being appended (whole in the file
// before Append publishes it).
func TestStatsBesideWriter(t *testing.T) {
	dir := t.TempDir()
	l, err := engine.Open(dir, engine.Options{SegmentBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
		l.Close()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		body := bytes.Repeat([]byte("w"), 300)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.Append(body); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var last uint64
	for range 50 {
		st, err := readDirStats(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Log.Next < last || st.Log.Next > l.Next()+1 || st.Log.First != 0 || st.Queue != nil {
			t.Fatalf("read %+v after next %d (writer at %d)", st.Log, last, l.Next())
		}
		if want := int64(st.Log.Next) * 316; st.Log.Bytes != want {
			t.Fatalf("%d bytes for %d records of 316", st.Log.Bytes, st.Log.Next)
		}
		last = st.Log.Next
	}
	if last == 0 {
		t.Error("no read saw a record")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitUntil waits for cond for at most a minute (a hang).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// stats names the process that has the log open for writing and counts
// the segments it maps, as its own Log.Stats does; with no writer, nothing
// is mapped, and a queue's cursor is its head (where an opener starts).
func TestStatsWriterMappings(t *testing.T) {
	dir := t.TempDir()
	logOf(t, dir, 40, 100, 512) // 10 segments
	o := statsJSONOf(t, "--dir", dir)[0]
	wantJSON(t, o, map[string]any{"owner_pid": nil, "mapped_segments": 0, "end": 40})
	if out := mustRun(t, "", "stats", "--dir", dir).stdout; !strings.Contains(out, "mapped       0 (no writer)") {
		t.Errorf("stats screen without a writer:\n%s", out)
	}

	l, err := engine.Open(dir, engine.Options{SegmentBytes: 512, MaxMappedSegments: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for off := uint64(0); off < 40; off += 4 { // every segment once: the cache keeps 3
		r, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	want := l.Stats().MappedSegments
	if want < 2 {
		t.Fatalf("the writer maps %d segments", want)
	}
	o = statsJSONOf(t, "--dir", dir)[0]
	wantJSON(t, o, map[string]any{"owner_pid": os.Getpid(), "mapped_segments": want})
	if out := mustRun(t, "", "stats", "--dir", dir).stdout; !strings.Contains(out, fmt.Sprintf("mapped       %d (writer pid %d)", want, os.Getpid())) {
		t.Errorf("stats screen beside the writer (%d mapped):\n%s", want, out)
	}
}

func TestStatsQueueCursor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	q, err := queue.Open(dir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := q.Send([]byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		m, ok, err := q.TryReceive()
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := q.Delete(m.Offset); err != nil {
			t.Fatal(err)
		}
	}
	// Beside the open queue the cursor is in its memory only.
	wantJSON(t, statsJSONOf(t, "--dir", dir)[0], map[string]any{"cursor": nil, "owner_pid": os.Getpid()})
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	o := statsJSONOf(t, "--dir", dir)[0]
	wantJSON(t, o, map[string]any{"head": 2, "cursor": 2, "end": 5, "owner_pid": nil, "mapped_segments": 0})
	if out := mustRun(t, "", "stats", "--dir", dir).stdout; !strings.Contains(out, "cursor       2\n") {
		t.Errorf("stats screen of a closed queue:\n%s", out)
	}
}
