package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

func runDump(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("dump", "--dir D [--from N] [--json]",
		"Prints one line per record from offset N on, good or damaged:\n"+
			"  offset segment position size checksum ok\n"+
			"e.g. \"0 00000000000000000000.log 0 53 0x4405f473 true\". A field that cannot be\n"+
			"known (a record not found where it should be) prints as \"-\". A range of\n"+
			"offsets that no segment file holds prints as one line, for its first offset,\n"+
			"with a seventh field missing=N (how many offsets). With --json, one object\n"+
			"per line with the keys offset, segment, position, size, checksum (a string,\n"+
			"\"0x\" and 8 hex digits, as in the text) and ok, the unknown ones null, and\n"+
			"missing for a range. Why a record is damaged goes to standard error.\n"+
			"Opens the log read-only. On a store (many queues in one directory) it lists\n"+
			"its queues, \"queue ID NAME\" (JSON: id and name), and its logs, \"log NAME\n"+
			"first F next N segments S bytes B\" (JSON: log, first, next, segments,\n"+
			"bytes); dump --dir D/messages (or deletes, receives, names, heads) lists\n"+
			"the records of one.", stderr)
	dir := fs.String("dir", "", "log `directory`")
	from := fs.Uint64("from", 0, "first `offset` to list (default: the log's first)")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if ok, _ := queue.IsStore(*dir); ok {
		if isSet(fs, "from") {
			return usageError(fs, "--from lists one log's records: on a store, dump --dir %s", filepath.Join(*dir, storeMessagesDir))
		}
		return dumpStore(*dir, *asJSON, stdout, stderr)
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
		switch {
		case ri.Missing > 0:
			fmt.Fprintf(stderr, "pagelog dump: missing: offsets [%d, %d): no segment file holds them (segment %s ends before them)\n",
				ri.Offset, ri.Offset+ri.Missing, ri.Segment)
		case !ri.OK:
			fmt.Fprintf(stderr, "pagelog dump: damaged: offset %d in segment %s%s: %s\n",
				ri.Offset, ri.Segment, atPosition(ri.Position), damageReason(&ri))
		}
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "dump", fmt.Errorf("write stdout: %w", err))
	}
	return 0
}

// atPosition is " at position N", or "" when the position is unknown.
func atPosition(pos int64) string {
	if pos < 0 {
		return ""
	}
	return fmt.Sprintf(" at position %d", pos)
}

// appendInfoText appends "offset segment position size 0xchecksum ok\n",
// with "-" for what is unknown, and " missing=N" for a missing range.
func appendInfoText(b []byte, ri engine.RecordInfo) []byte {
	b = strconv.AppendUint(b, ri.Offset, 10)
	b = append(b, ' ')
	b = append(b, ri.Segment...)
	b = append(b, ' ')
	b = appendKnown(b, ri.Position)
	b = append(b, ' ')
	b = appendKnown(b, ri.Size)
	b = append(b, ' ')
	if ri.Size >= 0 {
		b = append(b, "0x"...)
		b = appendHex32(b, ri.Checksum)
	} else {
		b = append(b, '-')
	}
	b = append(b, ' ')
	b = strconv.AppendBool(b, ri.OK)
	if ri.Missing > 0 {
		b = append(b, " missing="...)
		b = strconv.AppendUint(b, ri.Missing, 10)
	}
	return append(b, '\n')
}

func appendKnown(b []byte, v int64) []byte {
	if v < 0 {
		return append(b, '-')
	}
	return strconv.AppendInt(b, v, 10)
}

// appendInfoJSON appends the record as one JSON object and a newline;
// seg is the segment name already encoded as a JSON string.
func appendInfoJSON(b []byte, ri engine.RecordInfo, seg []byte) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendUint(b, ri.Offset, 10)
	b = append(b, `,"segment":`...)
	b = append(b, seg...)
	b = append(b, `,"position":`...)
	b = appendKnownJSON(b, ri.Position)
	b = append(b, `,"size":`...)
	b = appendKnownJSON(b, ri.Size)
	b = append(b, `,"checksum":`...)
	if ri.Size >= 0 {
		b = append(b, `"0x`...)
		b = appendHex32(b, ri.Checksum)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, ri.OK)
	if ri.Missing > 0 {
		b = append(b, `,"missing":`...)
		b = strconv.AppendUint(b, ri.Missing, 10)
	}
	return append(b, "}\n"...)
}

func appendKnownJSON(b []byte, v int64) []byte {
	if v < 0 {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, v, 10)
}

// appendHex32 appends v as 8 lowercase hex digits.
func appendHex32(b []byte, v uint32) []byte {
	const digits = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return b
}
