package engine_test

import (
	"fmt"
	"log"
	"os"

	"github.com/pagelog/pagelog/engine"
)

// logExample is the README's example of the log's API, word for word
// (readme_test.go at the module's root checks that they agree), so that it
// compiles and runs.
func logExample(dir string) error {
	l, err := engine.Open(dir, engine.Options{}) // zero Options: the defaults
	if err != nil {
		return err
	}
	defer l.Close()

	off, err := l.Append([]byte(`{"order":4127,"email":"confirmation"}`))
	if err != nil {
		return err
	}
	r, err := l.Read(off) // verified (checksum and id), zero-copy
	if err != nil {
		return err
	}
	fmt.Printf("%d: %s\n", off, r.Body) // a slice of the read-only mapping
	r.Release()                         // the slice is valid until Release

	for rec, err := range l.Records(0) { // sequential reader (range over func)
		if err != nil {
			log.Print(err) // a damaged record: reported, and the scan goes on
			continue
		}
		_ = rec.Body // valid until the loop body returns
	}
	return nil
}

func Example_readme() {
	dir, err := os.MkdirTemp("", "pagelog-readme")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := logExample(dir); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 0: {"order":4127,"email":"confirmation"}
}
