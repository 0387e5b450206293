package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// A consumer with a durable position: it may run in another process than
// the writer, and resumes where its last Commit left it.
func ExampleOpenCursor() {
	dir, err := os.MkdirTemp("", "pagelog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	w, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for _, m := range []string{"order 1", "order 2", "order 3"} {
		if _, err := w.Append([]byte(m)); err != nil {
			log.Fatal(err)
		}
	}

	if err := consume(dir, 2); err != nil { // reads two, commits, stops
		log.Fatal(err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		_, _ = w.Append([]byte("order 4")) // Next waits for it
	}()
	if err := consume(dir, 2); err != nil { // goes on after the commit
		log.Fatal(err)
	}
	infos, err := engine.Cursors(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: position %d, lag %d\n", infos[0].Name, infos[0].Position, infos[0].Lag)
	// Output:
	// 0: order 1
	// 1: order 2
	// 2: order 3
	// 3: order 4
	// billing: position 4, lag 0
}

// consume reads n records through the cursor "billing", then commits.
func consume(dir string, n int) error {
	c, err := engine.OpenCursor(dir, "billing", engine.CursorOptions{})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range n {
		rec, err := c.Next(ctx) // waits for the next record
		if err != nil {
			return err
		}
		fmt.Printf("%d: %s\n", rec.Offset, rec.Body)
		rec.Release()
	}
	return c.Commit() // a restart resumes after the last record Next returned
}
