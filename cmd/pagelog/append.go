package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/pagelog/pagelog/engine"
)

func runAppend(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("append", "--dir D [--segment-bytes N] [--sync none|always|interval]",
		"Opens the log in D for writing (creating it if needed) and appends each line\n"+
			"of standard input as one record (the newline removed; a last line without a\n"+
			"newline counts too). Prints each record's offset on its own line as soon as\n"+
			"the append is acknowledged.", stderr)
	dir := fs.String("dir", "", "log `directory`")
	segBytes := fs.Int64("segment-bytes", 0, "segment roll size in `bytes` for new segments (0: as stored, or 64 MiB)")
	syncName := fs.String("sync", engine.SyncNone.String(), "when an append is acknowledged: none, always or interval")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if *segBytes < 0 || *segBytes > engine.MaxSegmentBytes {
		return usageError(fs, "--segment-bytes %d outside [0, %d]", *segBytes, int64(engine.MaxSegmentBytes))
	}
	policy, err := engine.ParseSyncPolicy(*syncName)
	if err != nil {
		return usageError(fs, "--sync %q: want none, always or interval", *syncName)
	}

	l, err := engine.Open(*dir, engine.Options{SegmentBytes: *segBytes, Sync: policy})
	if err != nil {
		return fail(stderr, "append", err)
	}
	err = appendLines(l, stdin, stdout)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(stderr, "append", err)
	}
	return 0
}

// appendLines appends every line of in and writes each offset to out,
// flushed at once so that a reader of a pipe sees it.
func appendLines(l *engine.Log, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64)
	var long []byte // holds a line longer than r's buffer
	var num []byte
	for {
		line, err := readLine(r, &long)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read stdin: %w", err)
		}
		if line == nil { // EOF with nothing before it
			return nil
		}
		off, aerr := l.Append(line)
		if aerr != nil {
			return aerr
		}
		num = strconv.AppendUint(num[:0], off, 10)
		num = append(num, '\n')
		if _, werr := w.Write(num); werr != nil {
			return fmt.Errorf("write stdout: %w", werr)
		}
		if ferr := w.Flush(); ferr != nil {
			return fmt.Errorf("write stdout: %w", ferr)
		}
		if err != nil { // the last line, without a newline
			return nil
		}
	}
}

// readLine returns the next line without its '\n' (a '\r' before it is
// kept: it is part of the message). It returns a nil line at the end of
// input, and a non-nil line with io.EOF for a last line that has no
// newline. The line is valid until the next call. Lines of any length are
// read: the engine refuses a body above its limit.
func readLine(r *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(line) == 0 {
			return nil, err
		}
		return line, err
	}
	buf := append((*long)[:0], line...)
	for {
		line, err = r.ReadSlice('\n')
		buf = append(buf, line...)
		if err == nil {
			*long = buf
			return buf[:len(buf)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			*long = buf
			return buf, err
		}
	}
}
