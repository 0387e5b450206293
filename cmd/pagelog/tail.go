package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/pagelog/pagelog/engine"
)

func runTail(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("tail", "--dir D [--from N | --cursor NAME] [--follow] [--json]",
		"Prints the bodies of a log's records in order, one per line, escaped so that\n"+
			"one record is one line (\\n, \\t, \\r, \\\\ and \\xNN for other control bytes and\n"+
			"bytes that are not UTF-8). With --json, one object per line: offset and body\n"+
			"(a JSON string), or body_base64 when the body is not UTF-8.\n"+
			"It starts at --from (a number, \"first\" or \"end\"; default first) or at the\n"+
			"position cursor NAME committed (the cursor is created at the first record if\n"+
			"it does not exist, and commits what was printed as it goes: the next\n"+
			"`pagelog tail --cursor NAME` goes on from there). Without --follow it stops\n"+
			"at the end the log had when it started; with --follow it waits for records\n"+
			"another process appends, like tail -f, until interrupted (from an offset\n"+
			"past the end, it waits for the records up to it, then prints from it).\n"+
			"A cursor has one holder at a time: one open elsewhere is an error.\n"+
			"Records the log dropped before they were printed (from --from below its\n"+
			"first record too), and damaged ones, are reported on standard error (in\n"+
			"the JSON line's error with --json) and skipped; the exit status is then 1.\n"+
			"Read-only toward the log: it takes no lock and changes no file of the log\n"+
			"(a cursor's position file is its own, under D/cursors/).", stderr)
	dir := fs.String("dir", "", "log `directory`")
	fromFlag := fs.String("from", "first", "offset to start at: a `number`, first or end")
	cursor := fs.String("cursor", "", "read through the cursor of this `name`, committing as it prints")
	follow := fs.Bool("follow", false, "wait for records appended later, until interrupted")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if *cursor != "" && isSet(fs, "from") {
		return usageError(fs, "--from and --cursor exclude each other")
	}
	from, err := parseFrom(*fromFlag)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	t := &tailer{w: bufio.NewWriterSize(stdout, 64<<10), stderr: stderr, json: *asJSON}
	if *cursor != "" {
		c, err := engine.OpenCursor(*dir, *cursor, engine.CursorOptions{})
		if errors.Is(err, engine.ErrLocked) {
			return fail(stderr, "tail", fmt.Errorf("cursor %q of %s is held by another holder (another `pagelog tail --cursor %s`, or a program that opened it): a cursor has one holder at a time", *cursor, *dir, *cursor))
		}
		if err != nil {
			return fail(stderr, "tail", err)
		}
		for _, n := range c.Notes() {
			fmt.Fprintf(stderr, "pagelog tail: cursor %s: %s\n", *cursor, n)
		}
		t.log, t.cur = c.Log(), c
		t.off = c.Position()
		defer c.Close()
	} else {
		l, err := engine.OpenReadOnly(*dir, engine.Options{})
		if err != nil {
			return fail(stderr, "tail", err)
		}
		defer l.Close()
		t.log = l
		switch {
		case from == fromFirst:
			t.off = l.First()
		case from == fromEnd:
			t.off = l.Next()
		default:
			t.off = from
		}
	}
	if err := t.run(ctx, *follow); err != nil {
		return fail(stderr, "tail", err)
	}
	if t.bad {
		return 1
	}
	return 0
}

const (
	fromFirst = ^uint64(0)
	fromEnd   = ^uint64(0) - 1
)

// parseFrom parses --from: a number, "first" or "end".
func parseFrom(s string) (uint64, error) {
	switch s {
	case "first":
		return fromFirst, nil
	case "end":
		return fromEnd, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n >= fromEnd {
		return 0, fmt.Errorf("--from %q: want an offset, first or end", s)
	}
	return n, nil
}

// flushEvery bounds what a crash of tail --cursor prints again: the
// position is committed at least this often (in records).
const flushEvery = 4096

// tailer prints records from off on.
type tailer struct {
	log    *engine.Log
	cur    *engine.Cursor // nil without --cursor
	off    uint64
	w      *bufio.Writer
	stderr io.Writer
	json   bool
	bad    bool // a record was reported instead of printed
}

func (t *tailer) run(ctx context.Context, follow bool) error {
	end := t.log.Next()
	if follow && t.off > end {
		// --from past the end: the records up to it are appended first.
		if err := t.log.Wait(ctx, t.off-1); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
	}
	for n := 1; ; n++ {
		now := t.log.Next()
		if !follow && t.off >= min(end, now) {
			break // the end it started with, or a cut below it
		}
		if t.off >= now || n%flushEvery == 0 {
			// Nothing to print now: what was printed goes out (and is
			// committed) before waiting.
			if err := t.flush(); err != nil {
				return err
			}
		}
		var rec engine.Record
		var err error
		if t.cur != nil {
			rec, err = t.cur.Next(ctx)
			t.off = t.cur.Position()
		} else {
			rec, t.off, err = t.log.ReadNext(ctx, t.off)
		}
		switch {
		case err == nil:
			t.print(rec, nil)
			rec.Release()
		case errors.Is(err, context.Canceled):
			return t.flush()
		case errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrCorrupt):
			t.bad = true
			t.print(rec, err)
		default:
			_ = t.flush()
			return err
		}
	}
	return t.flush()
}

// print writes one record, or the error that stands for it.
func (t *tailer) print(rec engine.Record, err error) {
	switch {
	case t.json:
		writeJSONBody(t.w, map[string]any{"offset": rec.Offset}, rec.Body, err)
	case err != nil:
		_ = t.w.Flush()
		fmt.Fprintf(t.stderr, "pagelog tail: %s\n", strings.TrimPrefix(err.Error(), "pagelog: "))
	default:
		writeEscaped(t.w, rec.Body)
		t.w.WriteByte('\n')
	}
}

// flush writes out what was printed, then commits the cursor's position:
// a record is committed only once it is out.
func (t *tailer) flush() error {
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("write stdout: %w", err)
	}
	if t.cur != nil {
		return t.cur.Commit()
	}
	return nil
}
