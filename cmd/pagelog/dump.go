package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/pagelog/pagelog/engine"
)

func runDump(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("dump", "--dir D [--from N] [--json]",
		"Prints one line per record from offset N on, good or damaged:\n"+
			"  offset segment position size checksum ok\n"+
			"e.g. \"0 00000000000000000000.log 0 53 0x4405f473 true\"; with --json one\n"+
			"object per line with the keys offset, segment, position, size, checksum\n"+
			"and ok. Why a record is damaged goes to standard error. Opens the log\n"+
			"read-only.", stderr)
	dir := fs.String("dir", "", "log `directory`")
	from := fs.Uint64("from", 0, "first `offset` to list (default: the log's first)")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}

	l, err := engine.OpenReadOnly(*dir, engine.Options{})
	if err != nil {
		return fail(stderr, "dump", err)
	}
	defer l.Close()
	w := bufio.NewWriterSize(stdout, 256<<10)
	var line []byte
	var seg string
	var segJSON []byte // seg as a JSON string, made once per segment
	for ri := range l.Inspect(*from) {
		if *asJSON && ri.Segment != seg {
			seg = ri.Segment
			segJSON, _ = json.Marshal(seg)
		}
		if *asJSON {
			line = appendInfoJSON(line[:0], ri, segJSON)
		} else {
			line = appendInfoText(line[:0], ri)
		}
		if _, err := w.Write(line); err != nil {
			return fail(stderr, "dump", fmt.Errorf("write stdout: %w", err))
		}
		if !ri.OK {
			fmt.Fprintf(stderr, "pagelog dump: damaged: offset %d in segment %s at position %d: %s\n",
				ri.Offset, ri.Segment, ri.Position, damageReason(&ri))
		}
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "dump", fmt.Errorf("write stdout: %w", err))
	}
	return 0
}

// appendInfoText appends "offset segment position size 0xchecksum ok\n".
func appendInfoText(b []byte, ri engine.RecordInfo) []byte {
	b = strconv.AppendUint(b, ri.Offset, 10)
	b = append(b, ' ')
	b = append(b, ri.Segment...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, ri.Position, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, ri.Size, 10)
	b = append(b, " 0x"...)
	b = appendHex32(b, ri.Checksum)
	b = append(b, ' ')
	b = strconv.AppendBool(b, ri.OK)
	return append(b, '\n')
}

// appendInfoJSON appends the record as one JSON object and a newline;
// seg is the segment name already encoded as a JSON string.
func appendInfoJSON(b []byte, ri engine.RecordInfo, seg []byte) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendUint(b, ri.Offset, 10)
	b = append(b, `,"segment":`...)
	b = append(b, seg...)
	b = append(b, `,"position":`...)
	b = strconv.AppendInt(b, ri.Position, 10)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, ri.Size, 10)
	b = append(b, `,"checksum":`...)
	b = strconv.AppendUint(b, uint64(ri.Checksum), 10)
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, ri.OK)
	return append(b, "}\n"...)
}

// appendHex32 appends v as 8 lowercase hex digits.
func appendHex32(b []byte, v uint32) []byte {
	const digits = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return b
}
