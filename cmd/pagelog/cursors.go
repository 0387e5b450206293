package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pagelog/pagelog/engine"
)

func runCursors(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("cursors", "--dir D [--json]",
		"Lists the cursors of a log (consumer positions, kept under D/cursors/): each\n"+
			"one's name, committed position (the offset it resumes at), lag (records\n"+
			"from there to the log's end) and when it committed; a position file that\n"+
			"fails its checks is marked damaged, with why. With --json, one object per\n"+
			"line. Read-only: it takes no lock (a cursor may be committing) and changes\n"+
			"no file.", stderr)
	dir := fs.String("dir", "", "log `directory`")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	infos, err := engine.Cursors(*dir)
	if err != nil {
		return fail(stderr, "cursors", err)
	}
	if *asJSON {
		w := bufio.NewWriter(stdout)
		for _, c := range infos {
			o := map[string]any{"name": c.Name, "position": c.Position, "lag": c.Lag}
			if !c.Committed.IsZero() {
				o["committed"] = c.Committed.UTC().Format(time.RFC3339Nano)
			}
			if c.Damaged != "" {
				o["damaged"] = c.Damaged
			}
			b, _ := json.Marshal(o)
			w.Write(b)
			w.WriteByte('\n')
		}
		if err := w.Flush(); err != nil {
			return fail(stderr, "cursors", err)
		}
		return 0
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	io.WriteString(w, "NAME\tPOSITION\tLAG\tCOMMITTED\n")
	for _, c := range infos {
		at := "-"
		if !c.Committed.IsZero() {
			at = c.Committed.UTC().Format(time.RFC3339)
		}
		if c.Damaged != "" {
			at = "damaged: " + c.Damaged
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", c.Name, c.Position, c.Lag, at)
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "cursors", err)
	}
	return 0
}
