package main

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// progressThreshold: verify draws a bar only for a log larger than this.
const progressThreshold = 1 << 30

func runVerify(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("verify", "--dir D",
		"Checks every record (checksum and id) and both indexes of every segment,\n"+
			"and prints a report with what opening the log found. On a queue's\n"+
			"directory it also reports what queue.head, the delete log and the\n"+
			"receive-count log say (lines starting with \"queue\"), with the records\n"+
			"they lost, and verifies the delete log. Exits 0 when all is\n"+
			"healthy, 1 otherwise, naming the first damaged record. Opens everything\n"+
			"read-only. On a store (many queues in one directory) it verifies each of\n"+
			"its logs (a report under a line \"== log NAME/\"), reports what its records\n"+
			"say (queues, orphan records, damaged records: lines starting \"store\"),\n"+
			"then opens the store for writing, as its owner would, and checks that every\n"+
			"queue opens (skipped while another process has the store open).", stderr)
	dir := fs.String("dir", "", "log `directory`")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if ok, _ := queue.IsStore(*dir); ok {
		return verifyStore(*dir, stdout, stderr)
	}

	l, err := engine.OpenReadOnly(*dir, engine.Options{})
	if err != nil {
		return fail(stderr, "verify", err)
	}
	defer l.Close()
	var bar *progress
	start := time.Now()
	rep, err := l.Verify(func(done, total int64) {
		if bar == nil && total > progressThreshold {
			bar = newProgress(stderr, "verify", total, formatBytes)
		}
		bar.update(done)
	})
	took := time.Since(start)
	bar.finish()
	if err != nil {
		return fail(stderr, "verify", err)
	}
	w := bufio.NewWriter(stdout)
	writeVerifyReport(w, rep, l.First(), l.Next(), took)
	healthy := rep.Healthy()
	if ok, _ := queue.IsQueue(*dir); ok {
		healthy = verifyQueue(w, *dir) && healthy
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "verify", fmt.Errorf("write stdout: %w", err))
	}
	if !healthy {
		return 1
	}
	return 0
}

// verifyQueue prints what the files of the queue in dir say (queue.head,
// the delete log, the receive-count log: their damaged records and the
// ranges of records queue.head says they hold and they lost, with how
// many messages that may bring back) and verifies the delete log. It
// reports whether all is well.
func verifyQueue(w io.Writer, dir string) bool {
	st, err := queue.Stat(dir)
	if err != nil {
		fmt.Fprintf(w, "queue: %v\n", err)
		return false
	}
	for _, kv := range queueStatusLines(st) {
		fmt.Fprintf(w, "queue %s: %v\n", kv.k, kv.v)
	}
	for _, d := range st.DeleteDamage {
		fmt.Fprintf(w, "queue damaged delete record (its message may be handed out again): %s\n", d)
	}
	if st.DeletesLost > 0 {
		fmt.Fprintf(w, "queue delete log damage: up to %d deleted messages may be handed out again\n", st.DeletesLost)
	}
	for _, d := range st.ReceiveDamage {
		fmt.Fprintf(w, "queue damaged receive-count record (its message may be handed out once more): %s\n", d)
	}
	if st.ReceivesLost > 0 {
		fmt.Fprintf(w, "queue receive-count log damage: up to %d more hand-outs before messages reach MaxReceives\n", st.ReceivesLost)
	}
	healthy := st.CheckpointError == nil && len(st.DeleteDamage) == 0 && len(st.ReceiveDamage) == 0 && st.Lost == 0
	dels, err := engine.OpenReadOnly(filepath.Join(dir, "deletes"), engine.Options{})
	if err != nil {
		fmt.Fprintf(w, "queue delete log: %v\n", err)
		return false
	}
	defer dels.Close()
	rep, err := dels.Verify(nil)
	if err != nil {
		fmt.Fprintf(w, "queue delete log: %v\n", err)
		return false
	}
	fmt.Fprintf(w, "queue delete log: %d records verified, %d damaged, %d index problems\n", rep.Records, rep.Damaged, len(rep.IndexProblems))
	for _, p := range append(rep.Problems, rep.IndexProblems...) {
		fmt.Fprintf(w, "queue delete log problem: %s\n", p)
	}
	if healthy && rep.Healthy() {
		fmt.Fprintln(w, "queue healthy")
		return true
	}
	fmt.Fprintln(w, "queue NOT healthy")
	return false
}

// writeVerifyReport prints the report, one fact per line.
func writeVerifyReport(w io.Writer, rep engine.VerifyReport, first, next uint64, took time.Duration) {
	fmt.Fprintf(w, "segments: %d\n", rep.Segments)
	fmt.Fprintf(w, "records: %d verified, %d damaged, offsets [%d, %d)\n", rep.Records, rep.Damaged, first, next)
	fmt.Fprintf(w, "bytes: %d (%s)\n", rep.Bytes, formatBytes(rep.Bytes))
	writeRecovery(w, rep.Recovery)
	fmt.Fprintf(w, "verify took: %s\n", took.Round(time.Microsecond))
	if d := rep.FirstDamage; d != nil && d.Missing == 0 {
		fmt.Fprintf(w, "damaged: offset %d in segment %s%s: %s\n", d.Offset, d.Segment, atPosition(d.Position), damageReason(d))
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, p := range rep.IndexProblems {
		fmt.Fprintf(w, "index problem: %s\n", p)
	}
	if rep.Healthy() {
		fmt.Fprintln(w, "healthy")
	} else {
		fmt.Fprintf(w, "NOT healthy: %d damaged records, %d missing, %d problems, %d index problems\n",
			rep.Damaged, rep.Missing, len(rep.Problems), len(rep.IndexProblems))
	}
}

// writeRecovery prints what opening the log found, in readable form.
func writeRecovery(w io.Writer, r engine.Recovery) {
	fmt.Fprintf(w, "open: took %s, %d segments, %d indexes rebuilt, %d torn bytes truncated\n",
		r.Took.Round(time.Microsecond), r.Segments, r.IndexesRebuilt, r.TruncatedBytes)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "open: %s\n", n)
	}
	writeSegmentRecovery(w, "active segment", r.Active)
	for _, s := range r.Sealed {
		writeSegmentRecovery(w, "sealed segment", s)
	}
}

func writeSegmentRecovery(w io.Writer, what string, s engine.SegmentRecovery) {
	if s.Segment == "" {
		return // an empty log, or nothing was walked
	}
	fmt.Fprintf(w, "%s %s: walked %d records (%d bytes), end at %d, next offset %d\n",
		what, s.Segment, s.Records, s.Walked, s.End, s.Next)
	switch {
	case s.Cut && s.View:
		fmt.Fprintf(w, "%s %s: the bytes after position %d are not a whole record (%s): a record still being appended, or a torn tail that the next writable open cuts; not damage\n",
			what, s.Segment, s.End, s.CutReason)
	case s.Cut:
		fmt.Fprintf(w, "%s %s: torn tail after position %d: %s (%d bytes zeroed)\n",
			what, s.Segment, s.End, s.CutReason, s.ZeroedBytes)
	}
	if s.IndexRepaired {
		fmt.Fprintf(w, "%s %s: index repaired: %d entries added, %d dropped\n",
			what, s.Segment, s.EntriesAdded, s.EntriesDropped)
	}
	if s.Clean {
		fmt.Fprintf(w, "%s %s: clean close marker checked, nothing walked\n", what, s.Segment)
	} else if s.CleanMismatch != "" {
		fmt.Fprintf(w, "%s %s: clean close marker not trusted: %s\n", what, s.Segment, s.CleanMismatch)
	}
	for _, d := range s.Damaged {
		fmt.Fprintf(w, "%s %s: damage kept and reported (never cut without --truncate-at-damage): offset %d at position %d: %s\n",
			what, s.Segment, d.Offset, d.Position, d.Reason)
	}
}

// damageReason returns why the record is damaged, without the context the
// report line already gives: the engine's error repeats the offset, segment
// and position ("pagelog: corrupt record: offset 5 in segment ... at
// position 85: pagelog: corrupt record: checksum mismatch").
func damageReason(d *engine.RecordInfo) string {
	if d.Err == nil {
		return "does not verify"
	}
	msg := d.Err.Error()
	msg = strings.TrimPrefix(msg, fmt.Sprintf("%v: offset %d in segment %s%s: ",
		engine.ErrCorrupt, d.Offset, d.Segment, atPosition(d.Position)))
	return strings.TrimPrefix(msg, engine.ErrCorrupt.Error()+": ")
}
