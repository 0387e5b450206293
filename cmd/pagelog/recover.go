package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

func runRecover(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("recover", "--dir D [--truncate-at-damage]",
		"Opens the log for writing, which cuts a torn tail of the active segment,\n"+
			"rewrites every missing or damaged index and time-index file, verifies every\n"+
			"record and prints the recovery report. Damage before the recovery point is\n"+
			"only reported, never cut, unless --truncate-at-damage is given: then the log\n"+
			"is cut at its first damaged record and everything after it is removed.\n"+
			"Exits 0 when the log is healthy afterwards, 1 otherwise. On a store (many\n"+
			"queues in one directory) it recovers each of its logs (names, heads,\n"+
			"messages, deletes, receives), each report under a line \"== log NAME/\",\n"+
			"then opens the store and prints what it found (lines starting \"store\").", stderr)
	dir := fs.String("dir", "", "log `directory`")
	cut := fs.Bool("truncate-at-damage", false, "cut the log at its first damaged record")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if ok, _ := queue.IsStore(*dir); ok {
		return recoverStore(*dir, *cut, stdout, stderr)
	}
	rep, err := engine.Recover(*dir, engine.Options{}, engine.RecoverOptions{TruncateAtDamage: *cut})
	if err != nil {
		return fail(stderr, "recover", err)
	}
	w := bufio.NewWriter(stdout)
	writeRecoverReport(w, rep)
	if err := w.Flush(); err != nil {
		return fail(stderr, "recover", fmt.Errorf("write stdout: %w", err))
	}
	if !rep.After.Healthy() {
		return 1
	}
	return 0
}

// writeRecoverReport prints what Recover found and did, one fact per line.
func writeRecoverReport(w io.Writer, rep engine.RecoverReport) {
	for _, r := range rep.Renamed {
		fmt.Fprintf(w, "renamed: %s\n", r)
	}
	writeRecovery(w, rep.Open)
	for _, s := range rep.IndexesRewritten {
		fmt.Fprintf(w, "index rewritten: %s\n", s)
	}
	if d := rep.Damage; d != nil && d.Missing == 0 {
		fmt.Fprintf(w, "damaged: offset %d in segment %s%s: %s\n", d.Offset, d.Segment, atPosition(d.Position), damageReason(d))
	}
	for _, p := range rep.After.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	if rep.TruncatedAt != nil {
		fmt.Fprintf(w, "truncated at damage: offset %d and everything after it removed\n", *rep.TruncatedAt)
	}
	after := rep.After
	fmt.Fprintf(w, "after: %d segments, %d records verified, %d damaged, %d index problems\n",
		after.Segments, after.Records, after.Damaged, len(after.IndexProblems))
	if after.Healthy() {
		fmt.Fprintln(w, "healthy")
	} else {
		fmt.Fprintln(w, "NOT healthy: run with --truncate-at-damage to cut the log at the damage")
	}
}
