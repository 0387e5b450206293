package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

func runStats(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("stats", "--dir D [--watch [--interval T] [--count N]] [--json]",
		"Reads the log or queue in D beside the process that has it open (no lock\n"+
			"is taken, nothing is written) and prints one screen: offsets, segments,\n"+
			"bytes of records and on disk, the segments the writer maps (found through\n"+
			"/proc), and for a queue its depth, head, cursor (known when no process has\n"+
			"it open), the age of its oldest message and its dead letters.\n"+
			"On a store (many queues in one directory) it shows the store's totals,\n"+
			"its message log's figures and its deepest queues (--json: every queue).\n"+
			"--watch refreshes it every --interval with rates (appends/s from the next offset,\n"+
			"bytes/s, depth/s, deleted/s) until interrupted or --count refreshes;\n"+
			"--json prints one JSON object per refresh instead. Counters that only the owning process knows\n"+
			"(reads, syncs, in-flight messages) are not seen from here: the metrics\n"+
			"module's collectors export them from inside that process.", stderr)
	dir := fs.String("dir", "", "log or queue `directory`")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	interval := fs.Duration("interval", time.Second, "time between refreshes with --watch")
	count := fs.Int("count", 0, "with --watch: stop after this many refreshes (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print one JSON object per refresh")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	switch {
	case *interval <= 0:
		return usageError(fs, "--interval %v: want a positive duration", *interval)
	case *count < 0:
		return usageError(fs, "--count %d: want 0 or more", *count)
	case !*watch && (isSet(fs, "interval") || isSet(fs, "count")):
		return usageError(fs, "--interval and --count go with --watch")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := &statsWriter{out: stdout, json: *asJSON, watch: *watch, clear: *watch && !*asJSON && isTerminal(stdout)}
	if !*watch {
		*count = 1
	}
	if err := watchStats(ctx, *dir, *interval, *count, w, stderr); err != nil {
		return fail(stderr, "stats", err)
	}
	return 0
}

// watchStats reads dir's figures count times (0: until ctx is done), one
// interval apart, and writes each with the rates since the one before. A
// first read that fails is the command's error; a later one is reported on
// stderr and the watch goes on (the directory may come back).
func watchStats(ctx context.Context, dir string, interval time.Duration, count int, w *statsWriter, stderr io.Writer) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev *dirStats
	for n := 0; count == 0 || n < count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		st, err := readDirStats(dir)
		switch {
		case err != nil && prev == nil:
			return err
		case err != nil:
			fmt.Fprintf(stderr, "pagelog stats: %s: %v\n", time.Now().Format(time.TimeOnly), err)
			continue
		}
		if err := w.write(&st, prev); err != nil {
			return err
		}
		prev = &st
	}
	return nil
}

// dirStats is what the files of a log or queue directory say at one time.
type dirStats struct {
	At        time.Time
	Dir       string
	Log       engine.LogStats    // of a read-only open: offsets, segments, bytes
	DiskBytes int64              // what the directory's files take on disk
	Queue     *queueStats        // nil for a plain log
	Store     *queue.StoreStatus // a store's (Log is its message log's); nil for a log or queue
	// Owner is the process that has the log open for writing (0: none),
	// and Mapped the segments it maps, when OwnerKnown (see logOwner).
	Owner      int
	Mapped     int
	OwnerKnown bool
}

type queueStats struct {
	queue.Status
	// OldestAge is the age of the head message when AgeKnown: the time
	// index cannot tell it for a log with less than one index interval
	// (4 KiB by default) in a segment.
	OldestAge time.Duration
	AgeKnown  bool
}

// readDirStats reads the figures of the log or queue in dir without a lock.
func readDirStats(dir string) (dirStats, error) {
	st := dirStats{At: time.Now(), Dir: dir}
	if ok, err := queue.IsStore(dir); err != nil {
		return st, err
	} else if ok {
		return readStoreStats(st)
	}
	// Before this process maps anything of the log itself.
	st.Owner, st.Mapped, st.OwnerKnown = logOwner(dir)
	isQueue, err := queue.IsQueue(dir)
	if err != nil {
		return st, err
	}
	if isQueue {
		qs, err := queue.Stat(dir)
		if err != nil {
			return st, err
		}
		st.Queue = &queueStats{Status: qs} // Status.DeadLetters: those of <dir>.dead
	}
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		return st, err
	}
	defer l.Close()
	st.Log = l.Stats()
	if q := st.Queue; q != nil {
		q.AgeKnown = q.Messages == 0
		if t, ok := appendedAt(l, q.Head); ok && q.Messages > 0 {
			q.OldestAge, q.AgeKnown = max(st.At.Sub(t), 0), true
		}
	}
	st.DiskBytes, err = diskBytes(dir)
	return st, err
}

// cursor is where the queue hands out from next, as far as its files
// tell: with no process holding it open, a queue opening now starts at
// its head. Beside a writer it is in that process's memory only (its
// Stats.Cursor, exported by the metrics module).
func (st *dirStats) cursor() (uint64, bool) {
	if st.Queue == nil || !st.OwnerKnown || st.Owner != 0 {
		return 0, false
	}
	return st.Queue.Head, true
}

// appendedAt estimates when the record at off was appended, from l's time
// index (Log.OffsetForTime, one entry per IndexIntervalBytes): the time of
// the first entry at or after off, or of the newest one when off lies past
// it. It bisects on milliseconds for the first time at which
// OffsetForTime moves past that entry. ok is false when the index holds no
// entry (a log smaller than one interval per segment).
func appendedAt(l *engine.Log, off uint64) (time.Time, bool) {
	after := func(ms int64) uint64 { // the offset after the last entry stamped before ms
		o, err := l.OffsetForTime(time.UnixMilli(ms))
		if err != nil {
			return 0
		}
		return o
	}
	hi := time.Now().UnixMilli() + 1
	end := after(hi) // one past the newest entry's record
	if end <= l.First() {
		return time.Time{}, false
	}
	target := max(min(off, end-1), l.First())
	lo := int64(0)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if after(mid) > target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return time.UnixMilli(lo - 1), true
}

// diskBytes adds up the blocks that the files under dir take on disk (the
// active segment is preallocated: more than its records).
func diskBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil // removed meanwhile (a dropped segment)
			}
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		n += allocatedBytes(info)
		return nil
	})
	return n, err
}

// rates are the changes per second between two reads.
type rates struct {
	Appends float64 `json:"appends_per_second"`
	Bytes   float64 `json:"bytes_per_second"` // of records held: negative when segments were dropped
	// Of a queue (nil for a log): messages not deleted, and deleted (sends
	// minus the change of depth; moves to the dead letters included).
	Depth   *float64 `json:"depth_per_second,omitempty"`
	Deleted *float64 `json:"deleted_per_second,omitempty"`
}

func ratesBetween(prev, cur *dirStats) *rates {
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return nil
	}
	per := func(a, b float64) float64 { return (b - a) / dt }
	r := &rates{
		Appends: max(per(float64(prev.Log.Next), float64(cur.Log.Next)), 0),
		Bytes:   per(float64(prev.Log.Bytes), float64(cur.Log.Bytes)),
	}
	if prev.Queue != nil && cur.Queue != nil {
		depth := per(float64(prev.Queue.Messages), float64(cur.Queue.Messages))
		deleted := max(per(float64(prev.Queue.End), float64(cur.Queue.End))-depth, 0)
		r.Depth, r.Deleted = &depth, &deleted
	}
	return r
}

// statsWriter writes each read as a screen (cleared first in a terminal)
// or as one JSON object on a line.
type statsWriter struct {
	out   io.Writer
	json  bool
	watch bool // rates are shown ("-" until the second read)
	clear bool // in a terminal: each screen replaces the one before
	n     int
}

func (w *statsWriter) write(cur, prev *dirStats) error {
	var r *rates
	if prev != nil {
		r = ratesBetween(prev, cur)
	}
	b := bufio.NewWriter(w.out)
	switch {
	case w.json:
		out, err := json.Marshal(newStatsJSON(cur, r))
		if err != nil {
			return err
		}
		b.Write(out)
		b.WriteByte('\n')
	case w.clear:
		b.WriteString("\x1b[H\x1b[2J")
		writeStatsScreen(b, cur, r, w.watch)
	default:
		if w.n > 0 {
			b.WriteByte('\n')
		}
		writeStatsScreen(b, cur, r, w.watch)
	}
	w.n++
	return b.Flush()
}

// writeStatsScreen writes the figures as pairs in two columns. Rates are
// shown once there are two reads ("-" before, when watching).
func writeStatsScreen(w io.Writer, st *dirStats, r *rates, watching bool) {
	kind := "log"
	switch {
	case st.Queue != nil:
		kind = "queue"
	case st.Store != nil:
		kind = "store"
	}
	fmt.Fprintf(w, "pagelog stats %s (%s) at %s\n\n", st.Dir, kind, st.At.Format("2006-01-02 15:04:05"))
	pair := func(k1 string, v1 any, k2 string, v2 any) {
		fmt.Fprintf(w, "%-12s %-20v %-12s %v\n", k1, v1, k2, v2)
	}
	pair("first", st.Log.First, "next", st.Log.Next)
	pair("segments", st.Log.Segments, "log bytes", formatBytes(st.Log.Bytes))
	mapped := "unknown"
	switch {
	case st.OwnerKnown && st.Owner == 0:
		mapped = "0 (no writer)"
	case st.OwnerKnown:
		mapped = fmt.Sprintf("%d (writer pid %d)", st.Mapped, st.Owner)
	}
	pair("disk", formatBytes(st.DiskBytes), "mapped", mapped)
	if q := st.Queue; q != nil {
		oldest := "unknown"
		switch {
		case q.Messages == 0:
			oldest = "-"
		case q.AgeKnown:
			oldest = q.OldestAge.Round(time.Millisecond).String()
		}
		ck := "ok"
		switch {
		case q.CheckpointError != nil:
			ck = "damaged"
		case q.HeadFrom != "checkpoint":
			ck = "none"
		}
		fmt.Fprintln(w)
		pair("depth", q.Messages, "oldest", oldest)
		pair("head", q.Head, "end", q.End)
		cursor := "unknown (in the writer's memory)"
		if c, ok := st.cursor(); ok {
			cursor = fmt.Sprint(c)
		}
		fmt.Fprintf(w, "%-12s %v\n", "cursor", cursor)
		pair("deleted", q.Deleted, "lost", q.Lost)
		pair("dead letters", q.DeadLetters, "checkpoint", ck)
	}
	if st.Store != nil {
		writeStoreScreen(w, st.Store)
	}
	if r == nil && !watching {
		return
	}
	appends, bytes, depth, deleted := "-", "-", "-", "-"
	if r != nil {
		appends = fmt.Sprintf("%.1f", r.Appends)
		bytes = formatBytes(int64(max(r.Bytes, -r.Bytes))) + "/s"
		if r.Bytes < 0 {
			bytes = "-" + bytes
		}
		if r.Depth != nil {
			depth, deleted = fmt.Sprintf("%+.1f", *r.Depth), fmt.Sprintf("%.1f", *r.Deleted)
		}
	}
	fmt.Fprintln(w)
	pair("appends/s", appends, "bytes/s", bytes)
	if st.Queue != nil {
		pair("depth/s", depth, "deleted/s", deleted)
	}
}

// statsJSON is one object of `stats --json`: the queue's fields and the
// rates are left out when they do not apply.
type statsJSON struct {
	Time      string `json:"time"`
	Dir       string `json:"dir"`
	Kind      string `json:"kind"`
	First     uint64 `json:"first"`
	Next      uint64 `json:"next"`
	End       uint64 `json:"end"` // a log's next; a queue's end (the offset of its next send)
	Segments  int    `json:"segments"`
	Bytes     int64  `json:"bytes"`
	DiskBytes int64  `json:"disk_bytes"`
	// The writer's process and the segments it maps: null when it cannot
	// be told, owner_pid null and mapped_segments 0 when no process has
	// the log open for writing.
	OwnerPID       *int `json:"owner_pid"`
	MappedSegments *int `json:"mapped_segments"`
	*queueJSON
	*storeJSON
	*rates
}

type queueJSON struct {
	Depth           uint64   `json:"depth"`
	Head            uint64   `json:"head"`
	Cursor          *uint64  `json:"cursor"` // null beside a writer: it keeps it in memory
	Deleted         uint64   `json:"deleted"`
	Lost            uint64   `json:"lost"`
	OldestAge       *float64 `json:"oldest_age_seconds"` // null when the time index cannot tell
	DeadLetters     uint64   `json:"dead_letters"`
	CheckpointError *string  `json:"checkpoint_error"`
}

func newStatsJSON(st *dirStats, r *rates) statsJSON {
	o := statsJSON{
		Time: st.At.Format(time.RFC3339Nano), Dir: st.Dir, Kind: "log",
		First: st.Log.First, Next: st.Log.Next, End: st.Log.Next, Segments: st.Log.Segments,
		Bytes: st.Log.Bytes, DiskBytes: st.DiskBytes, rates: r,
	}
	if st.OwnerKnown {
		mapped := st.Mapped
		o.MappedSegments = &mapped
		if st.Owner != 0 {
			pid := st.Owner
			o.OwnerPID = &pid
		}
	}
	if st.Store != nil {
		o.Kind, o.storeJSON = "store", newStoreJSON(st.Store)
	}
	if q := st.Queue; q != nil {
		o.Kind = "queue"
		o.End = q.End
		o.queueJSON = &queueJSON{
			Depth: q.Messages, Head: q.Head, Deleted: q.Deleted, Lost: q.Lost,
			DeadLetters: q.DeadLetters,
		}
		if c, ok := st.cursor(); ok {
			o.Cursor = &c
		}
		if q.AgeKnown {
			age := q.OldestAge.Seconds()
			o.OldestAge = &age
		}
		if q.CheckpointError != nil {
			s := q.CheckpointError.Error()
			o.CheckpointError = &s
		}
	}
	return o
}
