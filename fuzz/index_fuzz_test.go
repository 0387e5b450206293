package fuzz

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/sparseidx"
)

// indexOpts shape the template log of FuzzIndexFiles: small segments with
// an index entry every few records.
var indexOpts = engine.Options{SegmentBytes: 1024, IndexIntervalBytes: 48, MaxRecordBytes: 200, FirstOffset: 500}

// indexTemplate is a log of three sealed segments and an active one,
// written by the engine and closed cleanly.
type indexTemplate struct {
	dir   string
	first uint64
	bases []uint64
	sizes []int64   // bytes of each segment's records
	pos   [][]int64 // each segment's record positions
	idx   [][]byte  // each segment's .index as written
	all   []wantRecord
}

func buildIndexTemplate(tb testing.TB, dir string) *indexTemplate {
	tb.Helper()
	l, err := engine.Open(dir, indexOpts)
	if err != nil {
		tb.Fatal(err)
	}
	tpl := &indexTemplate{dir: dir, first: indexOpts.FirstOffset}
	for i := 0; ; i++ {
		body, attrs := goodRecord(i)
		if _, err := l.AppendWith(body, attrs); err != nil {
			tb.Fatal(err)
		}
		w := wantRecord{body: body}
		if attrs != nil {
			w.attrs = *attrs
		}
		tpl.all = append(tpl.all, w)
		if bases := segmentBases(tb, dir); len(bases) == 4 && l.Next()-bases[3] == 6 {
			break
		}
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	tpl.bases = segmentBases(tb, dir)
	for i, base := range tpl.bases {
		data, err := os.ReadFile(segmentFile(dir, base, segment.LogSuffix))
		if err != nil {
			tb.Fatal(err)
		}
		next := l.Next()
		if i+1 < len(tpl.bases) {
			next = tpl.bases[i+1]
		}
		recs, end := refWalk(data, base, record.MaxLength(indexOpts.MaxRecordBytes))
		if uint64(len(recs)) != next-base {
			tb.Fatalf("template: segment %d holds %d records, want %d", base, len(recs), next-base)
		}
		tpl.sizes = append(tpl.sizes, end)
		var pos []int64
		for _, r := range recs {
			pos = append(pos, r.pos)
		}
		tpl.pos = append(tpl.pos, pos)
		idx, err := os.ReadFile(segmentFile(dir, base, segment.IndexSuffix))
		if err != nil {
			tb.Fatal(err)
		}
		n := sparseidx.Offsets{Buf: idx}.Valid(end)
		tpl.idx = append(tpl.idx, idx[:n*sparseidx.OffsetEntrySize])
	}
	return tpl
}

// Index file sources of FuzzIndexFiles' mode: bits 0-1 choose the offset
// index, bits 2-3 the time index.
const (
	srcFuzz     = 0 // the fuzz input
	srcMissing  = 1 // no file
	srcOriginal = 2 // the file as the engine wrote it
	srcDerived  = 3 // offsets: the original, then the fuzz input; times: entries agreeing with the offsets
	// indexNoMarker removes the clean-close marker.
	indexNoMarker = 1 << 4
	// indexProgram reads the fuzzed offset index as pairs of bytes (a, b),
	// each the entry (b mod (n+2), position of record a mod (n+1)) of a
	// segment of n records (position n: the end of the segment), so that
	// the fuzzer easily makes entries that point at record boundaries with
	// the wrong relative offsets.
	indexProgram = 1 << 5
)

// FuzzIndexFiles replaces one segment's .index and .timeindex (a sealed
// one, or the active one) with arbitrary bytes, then opens the log
// read-only and for writing: every offset must still read as the record
// written there (the indexes are a cache: used when they check out,
// rebuilt or ignored when not), and OffsetForTime must answer within the
// log. engine.Recover must then leave no index problem: the rebuilt files
// hold exactly the entries the log calls for.
func FuzzIndexFiles(f *testing.F) {
	tpl := buildIndexTemplate(f, f.TempDir())
	f.Fuzz(func(t *testing.T, which, mode uint8, offs, tims []byte) {
		if len(offs) > 1<<16 || len(tims) > 1<<16 {
			return
		}
		dir := filepath.Join(t.TempDir(), "log")
		testkit.MustCopyDir(t, tpl.dir, dir, true)
		seg := int(which) % len(tpl.bases)
		base := tpl.bases[seg]
		if mode&indexProgram != 0 {
			offs = entriesFor(offs, tpl.pos[seg], tpl.sizes[seg])
		}
		offPath := segmentFile(dir, base, segment.IndexSuffix)
		timPath := segmentFile(dir, base, segment.TimeIndexSuffix)
		switch mode & 3 {
		case srcFuzz:
			writeFile(t, offPath, offs)
		case srcMissing:
			_ = os.Remove(offPath)
		case srcDerived:
			offs = append(bytes.Clone(tpl.idx[seg]), offs...)
			writeFile(t, offPath, offs)
		default:
			offs, _ = os.ReadFile(offPath)
		}
		switch mode >> 2 & 3 {
		case srcFuzz:
			writeFile(t, timPath, tims)
		case srcMissing:
			_ = os.Remove(timPath)
		case srcDerived:
			writeFile(t, timPath, timesFor(offs))
		}
		if mode&indexNoMarker != 0 {
			_ = os.Remove(filepath.Join(dir, "log.clean"))
		}
		checkIndexFiles(t, tpl, dir)
	})
}

// checkIndexFiles runs the opens and checks of FuzzIndexFiles.
func checkIndexFiles(t *testing.T, tpl *indexTemplate, dir string) {
	ro, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	checkOffsetForTime(t, ro)
	checkServes(t, "read-only open", ro, tpl.first, tpl.all)
	checkOffsetForTime(t, ro)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	rw, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	checkServes(t, "writable open", rw, tpl.first, tpl.all)
	checkOffsetForTime(t, rw)
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}

	rep, err := engine.Recover(dir, engine.Options{}, engine.RecoverOptions{})
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(rep.After.IndexProblems) > 0 || rep.After.Damaged > 0 || rep.After.Records != uint64(len(tpl.all)) {
		t.Fatalf("after Recover: %d records, %d damaged, index problems %q", rep.After.Records, rep.After.Damaged, rep.After.IndexProblems)
	}
	for i, base := range tpl.bases[:len(tpl.bases)-1] {
		got, err := os.ReadFile(segmentFile(dir, base, segment.IndexSuffix))
		if err != nil || !bytes.Equal(got, tpl.idx[i]) {
			t.Fatalf("after Recover: %s holds %x (%v), the log calls for %x", segment.Name(base, segment.IndexSuffix), got, err, tpl.idx[i])
		}
	}
}

// entriesFor builds offset-index entries from pairs of bytes (see
// indexProgram) for a segment whose records lie at pos and end at end.
func entriesFor(prog []byte, pos []int64, end int64) []byte {
	out := make([]byte, 0, len(prog)/2*sparseidx.OffsetEntrySize)
	for i := 0; i+1 < len(prog); i += 2 {
		at := end
		if a := int(prog[i]) % (len(pos) + 1); a < len(pos) {
			at = pos[a]
		}
		out = binary.BigEndian.AppendUint32(out, uint32(int(prog[i+1])%(len(pos)+2)))
		out = binary.BigEndian.AppendUint32(out, uint32(at))
	}
	return out
}

// timesFor returns a time index that agrees with an offset index: the same
// relative offsets, times one millisecond apart.
func timesFor(offs []byte) []byte {
	x := sparseidx.Offsets{Buf: offs}
	out := make([]byte, x.Cap()*sparseidx.TimeEntrySize)
	tx := sparseidx.Times{Buf: out}
	for i := range x.Cap() {
		rel, _ := x.Entry(i)
		_ = tx.Put(i, 1_700_000_000_000+int64(i), rel)
	}
	return out
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func indexFilesSeeds(tb testing.TB) []seed {
	tpl := buildIndexTemplate(tb, tb.TempDir())
	entries := func(pairs ...uint32) []byte {
		b := make([]byte, 0, len(pairs)*4)
		for _, v := range pairs {
			b = binary.BigEndian.AppendUint32(b, v)
		}
		return b
	}
	orig := tpl.idx[1]
	x := sparseidx.Offsets{Buf: orig}
	lastRel, lastPos := x.Entry(x.Cap() - 1)
	s := func(name string, which, mode uint8, offs, tims []byte) seed {
		return seed{name, []any{which, mode, offs, tims}}
	}
	derived := uint8(srcFuzz | srcDerived<<2)
	seeds := []seed{
		s("empty-files", 0, 0, nil, nil),
		s("missing-files", 1, srcMissing|srcMissing<<2, nil, nil),
		s("original-offsets-missing-times", 2, srcOriginal|srcMissing<<2, nil, nil),
		s("original-offsets-empty-times", 1, srcOriginal, nil, nil),
		s("original", 1, srcOriginal|srcDerived<<2, nil, nil),
		s("original-with-junk", 1, srcDerived|srcDerived<<2, bytes.Repeat([]byte{0xff}, 24), nil),
		s("original-with-zero-entry-then-junk", 1, srcDerived|srcDerived<<2, append(make([]byte, 8), 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0), nil),
		s("original-cut-mid-entry", 1, srcFuzz|srcDerived<<2, orig[:len(orig)-3], nil),
		s("zero-entry-first", 1, derived, append(make([]byte, 8), orig...), nil),
		s("past-the-log", 1, derived, entries(1, 100, 2, 1<<20), nil),
		s("last-entry-past-the-log", 1, derived, append(bytes.Clone(orig), entries(lastRel+1, uint32(tpl.sizes[1]+16))...), nil),
		s("rel-past-the-segment", 1, derived, entries(lastRel+100, lastPos), nil),
		s("decreasing", 1, derived, entries(5, 300, 3, 200, 1, 100), nil),
		s("repeated-entry", 1, derived, append(bytes.Clone(orig[:8]), orig...), nil),
		s("mid-record", 1, derived, entries(1, 3), nil),
		s("times-decreasing", 1, srcOriginal, nil, append(entries(0, 2000, 1), entries(0, 1000, 2)...)),
		s("times-rel-mismatch", 1, srcOriginal, nil, entries(0, 1000, 7)),
		s("times-huge", 1, srcOriginal, nil, append(entries(0x7fffffff, 0xffffffff, 1), entries(0x7fffffff, 0xffffffff, 2)...)),
		s("times-negative", 1, srcOriginal, nil, entries(0x80000000, 0, 1)),
		s("ones", 3, 0, bytes.Repeat([]byte{0xff}, 64), bytes.Repeat([]byte{0xff}, 96)),
		s("active-junk", 3, srcFuzz|srcDerived<<2, entries(1, 50, 2, 90, 3, 2000), nil),
		s("active-original-with-junk", 3, srcDerived|srcDerived<<2, entries(0xffff, 0xffff), nil),
		s("active-no-marker", 3, srcFuzz|srcDerived<<2|indexNoMarker, entries(1, 7), nil),
	}
	seeds = append(seeds,
		s("program-true-entries", 0, derived|indexProgram, []byte{2, 2, 5, 5}, nil),
		s("program-entry-at-end", 2, derived|indexProgram, []byte{1, 1, 255, 3}, nil),
		s("program-shifted", 1, derived|indexProgram, []byte{4, 1, 5, 2, 6, 6}, nil))
	// Entries that are well formed and increasing, the last of them
	// verifying, but the earlier ones naming records at other records'
	// positions: a lookup that starts from them must still find its record.
	for seg := range tpl.bases[:len(tpl.bases)-1] {
		data, _ := os.ReadFile(segmentFile(tpl.dir, tpl.bases[seg], segment.LogSuffix))
		recs, _ := refWalk(data, tpl.bases[seg], record.MaxLength(indexOpts.MaxRecordBytes))
		x := sparseidx.Offsets{Buf: tpl.idx[seg]}
		if x.Cap() == 0 {
			continue
		}
		rel, pos := x.Entry(x.Cap() - 1)
		if rel < 6 {
			continue
		}
		bogus := entries(1, uint32(recs[rel-2].pos), 2, uint32(recs[rel-1].pos), rel, pos)
		seeds = append(seeds, s("shifted-entries-"+segment.Name(tpl.bases[seg], ""), uint8(seg), derived, bogus, nil))
	}
	return seeds
}
