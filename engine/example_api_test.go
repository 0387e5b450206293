package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// openTemp opens a new log in a temporary directory for an example; done
// closes and removes it.
func openTemp(opts engine.Options) (l *engine.Log, done func()) {
	dir, remove := tempDir()
	l, err := engine.Open(dir, opts)
	if err != nil {
		remove()
		log.Fatal(err)
	}
	return l, func() {
		l.Close()
		remove()
	}
}

// Open creates the log on first use; settings passed to it are kept in
// log.meta. A clean Close lets the next Open check the tail and walk
// nothing.
func ExampleOpen() {
	dir, remove := tempDir()
	defer remove()

	l, err := engine.Open(dir, engine.Options{Sync: engine.SyncAlways}) // Append returns once synced
	if err != nil {
		log.Fatal(err)
	}
	if _, err := l.Append([]byte("first")); err != nil {
		log.Fatal(err)
	}
	_, err = engine.Open(dir, engine.Options{}) // one writer per directory
	fmt.Println("second writer locked out:", errors.Is(err, engine.ErrLocked))
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}

	l, err = engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("clean:", l.Recovery().Clean, "next:", l.Next())
	// Output:
	// second writer locked out: true
	// clean: true next: 1
}

// Append returns the offset of the new record: offsets are dense, from
// Options.FirstOffset (0) on. Under the default SyncNone the record is in
// the page cache when Append returns; Sync (or WaitDurable) makes it
// durable.
func ExampleLog_Append() {
	l, done := openTemp(engine.Options{})
	defer done()

	for _, body := range []string{"a", "b"} {
		off, err := l.Append([]byte(body))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(body, "at", off)
	}
	if err := l.Sync(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("next", l.Next(), "durable", l.Durable())
	// Output:
	// a at 0
	// b at 1
	// next 2 durable 2
}

// Read returns a verified record without a copy; an offset outside the log
// is ErrNotFound.
func ExampleLog_Read() {
	l, done := openTemp(engine.Options{})
	defer done()
	if _, err := l.Append([]byte("hello")); err != nil {
		log.Fatal(err)
	}

	r, err := l.Read(0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", r.Body) // valid until Release
	r.Release()

	_, err = l.Read(1)
	fmt.Println(errors.Is(err, engine.ErrNotFound))
	// Output:
	// hello
	// true
}

// ReadNext is the step of a reader that never stops: it waits for the
// record, and says once, with an error, when offsets hold no record to
// return (here: below the offset the log began at).
func ExampleLog_ReadNext() {
	l, done := openTemp(engine.Options{FirstOffset: 10})
	defer done()
	if _, err := l.Append([]byte("first record")); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	off := uint64(0)
	for range 2 {
		rec, next, err := l.ReadNext(ctx, off)
		if errors.Is(err, engine.ErrTrimmed) {
			fmt.Println("trimmed; next", next)
		} else if err != nil {
			log.Fatal(err)
		} else {
			fmt.Printf("%d: %s\n", rec.Offset, rec.Body)
			rec.Release()
		}
		off = next
	}
	// Output:
	// trimmed; next 10
	// 10: first record
}

// Wait returns once a record exists; on a log opened read-only it follows
// the process that appends.
func ExampleLog_Wait() {
	w, done := openTemp(engine.Options{})
	defer done()
	ro, err := engine.OpenReadOnly(w.Dir(), engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()

	go func() {
		if _, err := w.Append([]byte("news")); err != nil {
			log.Print(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ro.Wait(ctx, 0); err != nil {
		log.Fatal(err)
	}
	r, err := ro.Read(0)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Release()
	fmt.Printf("%s\n", r.Body)
	// Output:
	// news
}

// damageRecord flips the first byte of body in the first segment file of
// the closed log in dir, as a failing disk might.
func damageRecord(dir string, body []byte) {
	name := filepath.Join(dir, "00000000000000000000.log")
	b, err := os.ReadFile(name)
	if err != nil {
		log.Fatal(err)
	}
	i := bytes.Index(b, body)
	if i < 0 {
		log.Fatalf("%q not in %s", body, name)
	}
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{body[0] ^ 0xff}, int64(i)); err != nil {
		log.Fatal(err)
	}
}

// appendClose appends the bodies to a new log in dir and closes it.
func appendClose(dir string, bodies ...string) {
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range bodies {
		if _, err := l.Append([]byte(b)); err != nil {
			log.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}
}

// Verify checks every record and index; a damaged record is reported, and
// the records around it still read.
func ExampleLog_Verify() {
	dir, remove := tempDir()
	defer remove()
	appendClose(dir, "alpha", "beta", "gamma")
	damageRecord(dir, []byte("beta"))

	l, err := engine.OpenReadOnly(dir, engine.Options{}) // what `pagelog verify` does
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	rep, err := l.Verify(nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("healthy:", rep.Healthy(), "records:", rep.Records, "damaged:", rep.Damaged, "first at:", rep.FirstDamage.Offset)
	_, err = l.Read(1)
	fmt.Println("read 1 corrupt:", errors.Is(err, engine.ErrCorrupt))
	r, err := l.Read(2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read 2: %s\n", r.Body)
	r.Release()
	// Output:
	// healthy: false records: 2 damaged: 1 first at: 1
	// read 1 corrupt: true
	// read 2: gamma
}

// Recover repairs what it can (a torn tail, index files, misnamed
// segments); damage is only cut when asked, with TruncateAtDamage.
func ExampleRecover() {
	dir, remove := tempDir()
	defer remove()
	appendClose(dir, "alpha", "beta", "gamma")
	damageRecord(dir, []byte("beta"))

	rep, err := engine.Recover(dir, engine.Options{}, engine.RecoverOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("damage at:", rep.Damage.Offset, "cut:", rep.TruncatedAt != nil, "healthy after:", rep.After.Healthy())

	rep, err = engine.Recover(dir, engine.Options{}, engine.RecoverOptions{TruncateAtDamage: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cut at:", *rep.TruncatedAt, "records:", rep.After.Records, "healthy after:", rep.After.Healthy())
	// Output:
	// damage at: 1 cut: false healthy after: false
	// cut at: 1 records: 1 healthy after: true
}

// Cursors lists the cursors of a log with their lag, from any process.
func ExampleCursors() {
	dir, remove := tempDir()
	defer remove()
	appendClose(dir, "a", "b", "c")

	c, err := engine.OpenCursor(dir, "audit", engine.CursorOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	r.Release()
	if err := c.Commit(); err != nil {
		log.Fatal(err)
	}
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}

	infos, err := engine.Cursors(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, ci := range infos {
		fmt.Println(ci.Name, "position", ci.Position, "lag", ci.Lag)
	}
	// Output:
	// audit position 1 lag 2
}
