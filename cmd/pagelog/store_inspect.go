package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// verifyStore verifies each log of the store in dir, reports what its
// records say and checks that every queue opens. It returns the exit
// status.
func verifyStore(dir string, stdout, stderr io.Writer) int {
	w := bufio.NewWriter(stdout)
	healthy := true
	for _, sub := range storeLogs {
		fmt.Fprintf(w, "== log %s/\n", sub)
		l, err := engine.OpenReadOnly(filepath.Join(dir, sub), engine.Options{})
		if err != nil {
			fmt.Fprintf(w, "problem: %s\n", errText(err))
			healthy = false
			continue
		}
		start := time.Now()
		rep, err := l.Verify(nil)
		if err != nil {
			fmt.Fprintf(w, "problem: %s\n", errText(err))
			healthy = false
		} else {
			writeVerifyReport(w, rep, l.First(), l.Next(), time.Since(start))
			healthy = healthy && rep.Healthy()
		}
		l.Close()
	}
	fmt.Fprintln(w, "== store")
	ok := writeStoreRecovery(w, dir)
	healthy = ok && healthy
	if ok {
		healthy = openEveryQueue(w, dir) && healthy
	}
	if healthy {
		fmt.Fprintln(w, "store healthy")
	} else {
		fmt.Fprintln(w, "store NOT healthy")
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "verify", fmt.Errorf("write stdout: %w", err))
	}
	if !healthy {
		return 1
	}
	return 0
}

// writeStoreRecovery prints what the store's records say, read without
// its lock; it reports whether they hold no damage.
func writeStoreRecovery(w io.Writer, dir string) bool {
	st, err := queue.StatStore(dir)
	if err != nil {
		fmt.Fprintf(w, "store: %s\n", errText(err))
		return false
	}
	writeStoreFindings(w, st.Recovery, st.Messages)
	return len(st.Recovery.Damaged) == 0
}

// writeStoreFindings prints a store's recovery: its queues, messages,
// orphan records and damaged records.
func writeStoreFindings(w io.Writer, rec queue.StoreRecovery, messages uint64) {
	fmt.Fprintf(w, "store queues: %d\n", rec.Queues)
	fmt.Fprintf(w, "store messages: %d\n", messages)
	fmt.Fprintf(w, "store orphan records: %d (of queues deleted, or whose creation was lost)\n", rec.Orphans)
	fmt.Fprintf(w, "store damaged records: %d\n", len(rec.Damaged))
	for _, d := range rec.Damaged {
		fmt.Fprintf(w, "store damaged: %s\n", d)
	}
}

// openEveryQueue opens the store in dir and each of its queues, as their
// owner would; it reports whether every one opened. Beside a process that
// has the store open it checks nothing and says so.
func openEveryQueue(w io.Writer, dir string) bool {
	start := time.Now()
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if errors.Is(err, engine.ErrLocked) {
		fmt.Fprintln(w, "store open: skipped: another process has the store open (its queues open in it)")
		return true
	}
	if err != nil {
		fmt.Fprintf(w, "store open: %s\n", errText(err))
		return false
	}
	opened, ok := 0, true
	for _, name := range s.Names() {
		if _, err := s.Queue(name); err != nil {
			fmt.Fprintf(w, "store queue %q does not open: %s\n", name, errText(err))
			ok = false
			continue
		}
		opened++
	}
	took := time.Since(start)
	if err := s.Close(); err != nil {
		fmt.Fprintf(w, "store close: %s\n", errText(err))
		ok = false
	}
	fmt.Fprintf(w, "store open: %d queues opened in %s\n", opened, took.Round(time.Microsecond))
	return ok
}

// recoverStore recovers each log of the store in dir, then opens the store
// and prints what it found. It returns the exit status.
func recoverStore(dir string, cut bool, stdout, stderr io.Writer) int {
	w := bufio.NewWriter(stdout)
	healthy := true
	for _, sub := range storeLogs {
		fmt.Fprintf(w, "== log %s/\n", sub)
		rep, err := engine.Recover(filepath.Join(dir, sub), engine.Options{}, engine.RecoverOptions{TruncateAtDamage: cut})
		if err != nil {
			fmt.Fprintf(w, "problem: %s\n", errText(err))
			healthy = false
			continue
		}
		writeRecoverReport(w, rep)
		healthy = healthy && rep.After.Healthy()
	}
	fmt.Fprintln(w, "== store")
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		fmt.Fprintf(w, "store open: %s\n", errText(err))
		healthy = false
	} else {
		writeStoreFindings(w, s.Recovery(), s.Stats().Messages)
		if err := s.Close(); err != nil {
			fmt.Fprintf(w, "store close: %s\n", errText(err))
			healthy = false
		}
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "recover", fmt.Errorf("write stdout: %w", err))
	}
	if !healthy {
		return 1
	}
	return 0
}

// dumpStore lists the queues of the store in dir (from its names log:
// id and name, in id order) and its logs' extents.
func dumpStore(dir string, asJSON bool, stdout, stderr io.Writer) int {
	w := bufio.NewWriter(stdout)
	line := func(o map[string]any, text string) {
		if asJSON {
			b, _ := json.Marshal(o)
			w.Write(append(b, '\n'))
		} else {
			w.WriteString(text + "\n")
		}
	}
	ids, names, err := storeNames(dir)
	if err != nil {
		return fail(stderr, "dump", err)
	}
	for _, id := range ids {
		line(map[string]any{"id": id, "name": names[id]}, fmt.Sprintf("queue %d %q", id, names[id]))
	}
	for _, sub := range storeLogs {
		l, err := engine.OpenReadOnly(filepath.Join(dir, sub), engine.Options{})
		if err != nil {
			return fail(stderr, "dump", err)
		}
		st := l.Stats()
		l.Close()
		line(map[string]any{"log": sub, "first": st.First, "next": st.Next, "segments": st.Segments, "bytes": st.Bytes},
			fmt.Sprintf("log %s first %d next %d segments %d bytes %d", sub, st.First, st.Next, st.Segments, st.Bytes))
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "dump", fmt.Errorf("write stdout: %w", err))
	}
	return 0
}

// storeNames reads the names log of the store in dir (FORMAT.md, Store
// files): the ids of the queues not deleted, in order, and their names. A
// damaged record is left out (verify reports it).
func storeNames(dir string) ([]uint32, map[uint32]string, error) {
	l, err := engine.OpenReadOnly(filepath.Join(dir, storeNamesDir), engine.Options{})
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	names := map[uint32]string{}
	for r, err := range l.Records(l.First()) {
		if err != nil || len(r.Body) < 5 {
			continue
		}
		id := binary.BigEndian.Uint32(r.Body[1:])
		switch r.Body[0] {
		case 1: // create
			names[id] = string(r.Body[5:])
		case 2: // delete
			delete(names, id)
		}
	}
	ids := make([]uint32, 0, len(names))
	for id := range names {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, names, nil
}

// errText is err's text without the library's "pagelog: " prefix.
func errText(err error) string { return strings.TrimPrefix(err.Error(), "pagelog: ") }
