package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pagelog/pagelog/queue"
)

func runQueueStats(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue stats", "(--dir D | --store D --queue NAME) [--json]",
		"Reads the queue in D, without opening it (no lock, nothing written: it works\n"+
			"beside the process that has the queue open), and prints one key and value\n"+
			"per line: end (next offset), head (oldest message not deleted), messages\n"+
			"(not deleted), deleted (above the head), and what the files say of its\n"+
			"recovery. Messages in flight in another process count as not deleted.\n\n"+queueAbout, stderr)
	t := targetFlags(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := t.check(fs); st >= 0 {
		return st
	}
	st, err := t.stat()
	if err != nil {
		return fail(stderr, "queue stats", err)
	}
	kvs := queueStatusLines(st)
	w := bufio.NewWriter(stdout)
	if *asJSON {
		o := make(map[string]any, len(kvs))
		for _, kv := range kvs {
			o[kv.k] = kv.v
		}
		b, _ := json.Marshal(o)
		w.Write(b)
		w.WriteByte('\n')
	} else {
		for _, kv := range kvs {
			v := kv.v
			if s, ok := v.(string); ok {
				v = strconv.Quote(s)
			}
			fmt.Fprintf(w, "%s %v\n", kv.k, v)
		}
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "queue stats", err)
	}
	return 0
}

func runQueueDead(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue dead", "(--dir D | --store D --queue NAME) [--json]",
		"Lists the dead letters of the queue in D: the messages not deleted of its\n"+
			"dead-letter queue, <D>.dead, oldest first, in the style of receive: the\n"+
			"dead letter's offset, a tab and its body (escaped), one per line. With\n"+
			"--json, one object per line: offset, origin (its offset in D), receives\n"+
			"(how many times D handed it out), group and dedup_id when it has them, and\n"+
			"body (or body_base64). It only reads, hands nothing out and works beside\n"+
			"the process that has the queue open. No dead-letter queue: nothing to list.\n"+
			"`pagelog queue receive --dir D.dead` hands dead letters out; `redrive`\n"+
			"moves them back.\n\n"+queueAbout, stderr)
	t := targetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON lines")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := t.check(fs); st >= 0 {
		return st
	}
	messages, err := t.deadLetters()
	if err != nil {
		return fail(stderr, "queue dead", err)
	}
	w := bufio.NewWriter(stdout)
	damaged := 0
	err = messages(func(m queue.Stored) bool {
		if m.Err != nil {
			damaged++
			fmt.Fprintf(stderr, "pagelog queue dead: offset %d is damaged: %s\n", m.Offset, strings.TrimPrefix(m.Err.Error(), "pagelog: "))
			if !*asJSON {
				return true
			}
		}
		if *asJSON {
			o := map[string]any{"offset": m.Offset, "receives": m.Receives}
			if m.HasOrigin {
				o["origin"] = m.Origin
			}
			if m.Group != "" {
				o["group"] = m.Group
			}
			if m.DedupID != "" {
				o["dedup_id"] = m.DedupID
			}
			writeJSONBody(w, o, m.Body, m.Err)
		} else {
			w.WriteString(strconv.FormatUint(m.Offset, 10))
			w.WriteByte('\t')
			writeEscaped(w, m.Body)
			w.WriteByte('\n')
		}
		return w.Flush() == nil
	})
	if err = errors.Join(err, w.Flush()); err != nil {
		return fail(stderr, "queue dead", err)
	}
	if damaged > 0 {
		return 1
	}
	return 0
}

type keyValue struct {
	k string
	v any
}

// queueStatusLines are the facts `queue stats` (and `verify` of a queue)
// print, in order.
func queueStatusLines(st queue.Status) []keyValue {
	ckErr := "none"
	if st.CheckpointError != nil {
		ckErr = st.CheckpointError.Error()
	}
	return []keyValue{
		{"end", st.End}, {"head", st.Head}, {"messages", st.Messages}, {"deleted", st.Deleted},
		{"first", st.First}, {"head_from", st.HeadFrom}, {"checkpoint_error", ckErr},
		{"checkpointed_head", st.Checkpointed}, {"checkpointed_end", st.CheckpointEnd},
		{"delete_records", st.DeleteRecords}, {"damaged_delete_records", len(st.DeleteDamage)},
		{"lost_offsets", st.Lost},
		{"receive_records", st.ReceiveRecords}, {"damaged_receive_records", len(st.ReceiveDamage)},
		{"deletes_lost", st.DeletesLost}, {"receives_lost", st.ReceivesLost},
		{"dead_letters", st.DeadLetters},
	}
}
