package main

import (
	"fmt"
	"io"

	"github.com/pagelog/pagelog/queue"
)

// storeMessagesDir is the message log of a store, shared by its queues
// (FORMAT.md, Store files); storeLogs are all of its logs.
const (
	storeMessagesDir = "messages"
	storeNamesDir    = "names"
)

var storeLogs = []string{storeNamesDir, "heads", storeMessagesDir, "deletes", "receives"}

// readStoreStats reads the figures of the store in st.Dir without a lock:
// its totals, every queue's depth and its message log's figures.
func readStoreStats(st dirStats) (dirStats, error) {
	// The store's lock is its names log's; its mappings are the message
	// log's segments.
	st.Owner, st.Mapped, st.OwnerKnown = storeOwner(st.Dir)
	ss, err := queue.StatStore(st.Dir)
	if err != nil {
		return st, err
	}
	st.Store, st.Log = &ss, ss.Log
	st.DiskBytes, err = diskBytes(st.Dir)
	return st, err
}

// writeStoreScreen writes the store's part of the stats screen: totals and
// its deepest queues.
func writeStoreScreen(w io.Writer, st *queue.StoreStatus) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-12s %-20v %-12s %v\n", "queues", st.Queues, "messages", st.Messages)
	fmt.Fprintf(w, "%-12s %-20v %-12s %v\n", "orphans", st.Recovery.Orphans, "damaged", len(st.Recovery.Damaged))
	n := min(len(st.Deepest), queue.StoreStatsDeepest)
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "\ndeepest queues (%d of %d; --json lists all):\n", n, st.Queues)
	for _, d := range st.Deepest[:n] {
		fmt.Fprintf(w, "  %12d  %q\n", d.Messages, d.Name)
	}
}

// storeJSON is the store's part of `stats --json`.
type storeJSON struct {
	Queues   int      `json:"queues"`
	Messages uint64   `json:"messages"`
	Orphans  uint64   `json:"orphan_records"`
	Damaged  []string `json:"damaged_records"`
	// Depths lists every queue, deepest first.
	Depths []queueDepthJSON `json:"queue_depths"`
}

type queueDepthJSON struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
}

func newStoreJSON(st *queue.StoreStatus) *storeJSON {
	o := &storeJSON{Queues: st.Queues, Messages: st.Messages, Orphans: st.Recovery.Orphans,
		Damaged: append([]string{}, st.Recovery.Damaged...), Depths: make([]queueDepthJSON, len(st.Deepest))}
	for i, d := range st.Deepest {
		o.Depths[i] = queueDepthJSON{d.Name, d.Messages}
	}
	return o
}
