package engine_test

import (
	"fmt"
	"log"
	"os"

	"github.com/pagelog/pagelog/engine"
)

// Open a log, append, read one record back without a copy, iterate, close.
func Example() {
	dir, err := os.MkdirTemp("", "pagelog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range []string{"alpha", "beta", "gamma"} {
		off, err := l.Append([]byte(m))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("appended", m, "at", off)
	}

	// Body points into the mapped segment: valid until Release.
	r, err := l.Read(1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read %d: %s\n", r.Offset, r.Body)
	r.Release()

	// Records yielded by the iterator are valid inside the loop body only.
	for r, err := range l.Records(0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("record %d: %s\n", r.Offset, r.Body)
	}
	fmt.Println("next:", l.Next())
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// appended alpha at 0
	// appended beta at 1
	// appended gamma at 2
	// read 1: beta
	// record 0: alpha
	// record 1: beta
	// record 2: gamma
	// next: 3
}

// A record read before Close stays valid until it is released.
func ExampleRecord_Release() {
	dir, err := os.MkdirTemp("", "pagelog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	l, err := engine.Open(dir, engine.Options{FirstOffset: 1000})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := l.Append([]byte("kept")); err != nil {
		log.Fatal(err)
	}
	r, err := l.Read(1000)
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d: %s\n", r.Offset, r.Body)
	r.Release()
	// Output:
	// 1000: kept
}

// Attributes travel with a record and come back from Record.Attrs.
func ExampleLog_AppendWith() {
	dir, err := os.MkdirTemp("", "pagelog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	off, err := l.AppendWith([]byte(`{"order":4127}`), &engine.Attrs{Group: []byte("customer-17"), HasReceives: true, Receives: 2})
	if err != nil {
		log.Fatal(err)
	}
	r, err := l.Read(off)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Release()
	a, err := r.Attrs()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s group=%s receives=%d\n", r.Body, a.Group, a.Receives)
	// Output:
	// {"order":4127} group=customer-17 receives=2
}

// A read-only log beside the writer sees the records whole when it opened,
// then follows the writer: Next, Read, Records and Wait see what it appends.
func ExampleOpenReadOnly() {
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
	w.Append([]byte("one"))
	w.Append([]byte("two"))

	ro, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()
	w.Append([]byte("three"))
	_, err = ro.Append([]byte("no"))
	fmt.Println("reader next:", ro.Next(), "writer next:", w.Next())
	fmt.Println(err)
	// Output:
	// reader next: 3 writer next: 3
	// pagelog: log is read-only
}
