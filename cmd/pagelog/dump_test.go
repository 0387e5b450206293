package main

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// info is one dump line, from either form.
type info struct {
	Offset   uint64 `json:"offset"`
	Segment  string `json:"segment"`
	Position int64  `json:"position"`
	Size     int64  `json:"size"`
	Checksum uint32 `json:"checksum"`
	OK       bool   `json:"ok"`
}

var textLine = regexp.MustCompile(`^(\d+) (\d{20}\.log) (\d+) (\d+) 0x([0-9a-f]{8}) (true|false)$`)

func parseDumpText(t *testing.T, out string) []info {
	t.Helper()
	var infos []info
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		m := textLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("dump line %q does not match %s", line, textLine)
		}
		var in info
		in.Offset, _ = strconv.ParseUint(m[1], 10, 64)
		in.Segment = m[2]
		in.Position, _ = strconv.ParseInt(m[3], 10, 64)
		in.Size, _ = strconv.ParseInt(m[4], 10, 64)
		c, _ := strconv.ParseUint(m[5], 16, 32)
		in.Checksum = uint32(c)
		in.OK = m[6] == "true"
		infos = append(infos, in)
	}
	return infos
}

func parseDumpJSON(t *testing.T, out string) []info {
	t.Helper()
	var infos []info
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &keys); err != nil {
			t.Fatalf("dump --json line %q: %v", line, err)
		}
		if len(keys) != 6 {
			t.Fatalf("dump --json line %q: want exactly 6 keys", line)
		}
		var raw struct {
			info
			Checksum string `json:"checksum"`
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("dump --json line %q: %v", line, err)
		}
		in := raw.info
		if !strings.HasPrefix(raw.Checksum, "0x") || len(raw.Checksum) != 10 {
			t.Fatalf("checksum %q in %q: want 0x and 8 hex digits, as the text form", raw.Checksum, line)
		}
		c, err := strconv.ParseUint(raw.Checksum[2:], 16, 32)
		if err != nil {
			t.Fatalf("checksum %q in %q: %v", raw.Checksum, line, err)
		}
		in.Checksum = uint32(c)
		if string(keys["ok"]) != "true" && string(keys["ok"]) != "false" {
			t.Fatalf("ok is not a boolean in %q", line)
		}
		infos = append(infos, in)
	}
	return infos
}

// checkDump checks the dump against the appended messages (from offset
// from on) and against the segment files themselves.
func checkDump(t *testing.T, dir string, infos []info, msgs []string, from int) {
	t.Helper()
	if len(infos) != len(msgs)-from {
		t.Fatalf("dump has %d lines, want %d", len(infos), len(msgs)-from)
	}
	files := map[string][]byte{}
	for i, in := range infos {
		off := from + i
		if in.Offset != uint64(off) {
			t.Fatalf("line %d has offset %d, want %d", i, in.Offset, off)
		}
		if want := int64(16 + len(msgs[off])); in.Size != want {
			t.Fatalf("offset %d: size %d, want %d", off, in.Size, want)
		}
		if !in.OK {
			t.Fatalf("offset %d: ok false", off)
		}
		b, ok := files[in.Segment]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(dir, in.Segment)); err != nil {
				t.Fatal(err)
			}
			files[in.Segment] = b
		}
		rec := b[in.Position : in.Position+in.Size]
		if got := crc32.Checksum(rec[8:], crc32.MakeTable(crc32.Castagnoli)); got != in.Checksum {
			t.Fatalf("offset %d: dump says checksum %#08x, CRC-32C of the record is %#08x", off, in.Checksum, got)
		}
		if string(rec[16:]) != msgs[off] {
			t.Fatalf("offset %d: body at %s:%d is %q, want %q", off, in.Segment, in.Position, rec[16:], msgs[off])
		}
	}
	if len(files) < 2 {
		t.Fatalf("the test wants several segments, got %d", len(files))
	}
}

func TestDump(t *testing.T) {
	dir := t.TempDir()
	msgs := messages("dump", 120)
	appendMessages(t, dir, msgs, "--segment-bytes", "600")
	text := mustRun(t, "", "dump", "--dir", dir)
	js := mustRun(t, "", "dump", "--dir", dir, "--json")
	ti, ji := parseDumpText(t, text.stdout), parseDumpJSON(t, js.stdout)
	checkDump(t, dir, ti, msgs, 0)
	checkDump(t, dir, ji, msgs, 0)
	if fmt.Sprint(ti) != fmt.Sprint(ji) {
		t.Fatal("text and JSON dumps disagree")
	}
	if text.stderr != "" || js.stderr != "" {
		t.Fatalf("stderr: %q %q", text.stderr, js.stderr)
	}
}

func TestDumpFrom(t *testing.T) {
	dir := t.TempDir()
	msgs := messages("from", 60)
	appendMessages(t, dir, msgs, "--segment-bytes", "500")
	for _, from := range []int{0, 1, 17, 59} {
		r := mustRun(t, "", "dump", "--dir", dir, "--from", strconv.Itoa(from))
		infos := parseDumpText(t, r.stdout)
		if len(infos) == 0 || infos[0].Offset != uint64(from) || len(infos) != len(msgs)-from {
			t.Fatalf("--from %d: %d lines starting at %v", from, len(infos), infos[:min(1, len(infos))])
		}
		r = mustRun(t, "", "dump", "--dir", dir, "--from", strconv.Itoa(from), "--json")
		if ji := parseDumpJSON(t, r.stdout); fmt.Sprint(ji) != fmt.Sprint(infos) {
			t.Fatalf("--from %d: JSON and text disagree", from)
		}
	}
	if r := mustRun(t, "", "dump", "--dir", dir, "--from", "60"); r.stdout != "" {
		t.Fatalf("--from past the end printed %q", r.stdout)
	}
}

// TestDumpTestVector checks both forms, byte for byte, against the test
// vector of FORMAT.md: the record at offset 1,268,410, checksum 0x4405f473.
func TestDumpTestVector(t *testing.T) {
	dir := t.TempDir()
	l, err := engine.Open(dir, engine.Options{FirstOffset: 1268410})
	if err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, "", "dump", "--dir", dir); r.stdout != "" {
		t.Fatalf("empty log dumped %q", r.stdout)
	}
	if _, err := l.Append([]byte(`{"order":4127,"email":"confirmation"}`)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := "1268410 00000000000001268410.log 0 53 0x4405f473 true\n"
	if r := mustRun(t, "", "dump", "--dir", dir); r.stdout != want {
		t.Fatalf("dump: got %q, want %q", r.stdout, want)
	}
	want = `{"offset":1268410,"segment":"00000000000001268410.log","position":0,"size":53,"checksum":"0x4405f473","ok":true}` + "\n"
	if r := mustRun(t, "", "dump", "--dir", dir, "--json"); r.stdout != want {
		t.Fatalf("dump --json: got %q, want %q", r.stdout, want)
	}
}
