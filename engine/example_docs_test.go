package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// attrsTimeExample is the example of docs/log.md, word for word
// (readme_test.go at the module's root checks every Go block of the docs
// against the example files), so that it compiles and runs.
func attrsTimeExample(l *engine.Log) error {
	off, err := l.AppendWith([]byte("order 4128"), &engine.Attrs{Group: []byte("customer-7")})
	if err != nil {
		return err
	}
	start, err := l.OffsetForTime(time.Now().Add(-time.Hour))
	if err != nil {
		return err
	}
	fmt.Println("first record of the last hour:", start)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.WaitDurable(ctx, off) // under SyncNone/SyncInterval: wait for a sync to cover off
}

// tempDir returns a new directory for an example, and its removal.
func tempDir() (string, func()) {
	dir, err := os.MkdirTemp("", "pagelog-example")
	if err != nil {
		log.Fatal(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

func Example_docsAttrsTime() {
	dir, remove := tempDir()
	defer remove()
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if err := attrsTimeExample(l); err != nil {
		log.Fatal(err)
	}
	fmt.Println("durable up to", l.Durable())
	// Output:
	// first record of the last hour: 0
	// durable up to 1
}

// docs/streams.md shows follow word for word.

// follow prints n records from offset from on, as another process appends them.
func follow(dir string, from uint64, n int) error {
	l, err := engine.OpenReadOnly(dir, engine.Options{}) // no lock: beside the writer
	if err != nil {
		return err
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for off := from; n > 0; {
		rec, next, err := l.ReadNext(ctx, off) // waits for the record at off
		off = next
		if errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrCorrupt) {
			log.Print(err) // dropped or damaged offsets: said once, then stepped over
			continue
		}
		if err != nil {
			return err
		}
		fmt.Printf("%d: %s\n", rec.Offset, rec.Body)
		rec.Release()
		n--
	}
	return nil
}

func Example_docsFollow() {
	dir, remove := tempDir()
	defer remove()
	w, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Append([]byte("order 1")); err != nil {
		log.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- follow(dir, 0, 3) }()
	for _, m := range []string{"order 2", "order 3"} { // appended while it follows
		if _, err := w.Append([]byte(m)); err != nil {
			log.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// 0: order 1
	// 1: order 2
	// 2: order 3
}
