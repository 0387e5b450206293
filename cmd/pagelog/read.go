package main

import (
	"fmt"
	"io"

	"github.com/pagelog/pagelog/engine"
)

func runRead(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("read", "--dir D --offset N",
		"Writes the body of the record at offset N, exactly, to standard output.\n"+
			"Opens the log read-only: takes no lock and changes no file.", stderr)
	dir := fs.String("dir", "", "log `directory`")
	offset := fs.Uint64("offset", 0, "`offset` of the record to read (required)")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if !isSet(fs, "offset") {
		return usageError(fs, "missing --offset")
	}

	l, err := engine.OpenReadOnly(*dir, engine.Options{})
	if err != nil {
		return fail(stderr, "read", err)
	}
	defer l.Close()
	rec, err := l.Read(*offset)
	if err != nil {
		return fail(stderr, "read", err)
	}
	_, err = stdout.Write(rec.Body)
	rec.Release()
	if err != nil {
		return fail(stderr, "read", fmt.Errorf("write stdout: %w", err))
	}
	return 0
}
