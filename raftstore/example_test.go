package raftstore_test

import (
	"fmt"
	"log"
	"os"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/raftstore"
)

// A Store is raft's LogStore and StableStore at once: pass it twice to
// raft.NewRaft. Here it is used directly.
func Example() {
	dir, err := os.MkdirTemp("", "raftstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := raftstore.Open(dir, raftstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// One append and one fsync for the batch.
	err = store.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("set x=1")},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("set y=2")},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("set x=3")},
	})
	if err != nil {
		log.Fatal(err)
	}
	// A follower drops a conflicting suffix; compaction drops a prefix.
	if err := store.DeleteRange(3, 3); err != nil {
		log.Fatal(err)
	}
	if err := store.DeleteRange(1, 1); err != nil {
		log.Fatal(err)
	}
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	var e raft.Log
	if err := store.GetLog(2, &e); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("entries [%d, %d]; entry 2: term %d, %q\n", first, last, e.Term, e.Data)

	// The StableStore: raft keeps its term and vote here.
	if err := store.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		log.Fatal(err)
	}
	term, _ := store.GetUint64([]byte("CurrentTerm"))
	_, err = store.Get([]byte("LastVoteCand"))
	fmt.Println("term", term, "| vote:", err)
	// Output:
	// entries [2, 2]; entry 2: term 1, "set y=2"
	// term 2 | vote: not found
}
