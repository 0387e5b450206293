package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/pagelog/pagelog/internal/segment"
)

// TestRecordsWithAttrs compares RecordsWithAttrs with Records over a log of
// several segments, a record in five carrying attributes, damaged in
// random places (a checksummed byte, a length field made zero, a byte of
// the id), reopened with the damage: every record with attributes that
// Records yields whole, RecordsWithAttrs yields; whatever RecordsWithAttrs
// yields whole, Records yields whole, with the same body and attributes;
// and what it reports damaged, Records does too. From the start and from
// a random offset.
func TestRecordsWithAttrs(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			dir := t.TempDir()
			opts := Options{SegmentBytes: 16 << 10}
			l := mustOpen(t, dir, opts)
			const n = 600
			for i := range n {
				body := bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 10+rng.IntN(200))
				var a *Attrs
				if i%5 == 0 {
					a = &Attrs{Group: []byte(fmt.Sprint("g", i%7))}
					if i%10 == 0 {
						a.Dedup = []byte(fmt.Sprint("id-", i))
					}
				}
				if _, err := l.AppendWith(body, a); err != nil {
					t.Fatal(err)
				}
			}
			var where []struct {
				base uint64
				pos  int64
				size int64
			}
			for in := range l.Inspect(0) {
				base, _, _ := segment.ParseName(in.Segment)
				where = append(where, struct {
					base uint64
					pos  int64
					size int64
				}{base, in.Position, in.Size})
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			for range 12 {
				off := rng.IntN(n)
				w := where[off]
				var at int64
				var b []byte
				switch rng.IntN(3) {
				case 0: // a byte of the record's checksummed part
					at, b = w.pos+8+rng.Int64N(w.size-8), []byte{byte(rng.IntN(256))}
				case 1: // the length field made zero
					at, b = w.pos, []byte{0, 0, 0, 0}
				default: // the id
					at, b = w.pos+8+rng.Int64N(8), []byte{0xFF}
				}
				patch(t, segPath(dir, w.base, segment.LogSuffix), at, b)
			}
			_ = os.Remove(segPath(dir, 0, segment.IndexSuffix)) // the first segment rebuilds its index
			l = mustOpen(t, dir, opts)
			defer l.Close()
			for _, from := range []uint64{0, uint64(rng.IntN(n))} {
				type got struct {
					ok          bool
					body, group []byte
				}
				all := map[uint64]got{}
				for r, err := range l.Records(from) {
					if err != nil {
						all[r.Offset] = got{}
						continue
					}
					a, err := r.Attrs()
					if err != nil {
						t.Fatal(err)
					}
					all[r.Offset] = got{ok: true, body: bytes.Clone(r.Body), group: bytes.Clone(a.Group)}
				}
				seen := map[uint64]bool{}
				for r, err := range l.RecordsWithAttrs(from) {
					seen[r.Offset] = true
					want, ok := all[r.Offset]
					if !ok {
						t.Fatalf("from %d: RecordsWithAttrs yields offset %d, which Records does not", from, r.Offset)
					}
					if err != nil {
						if want.ok {
							t.Fatalf("from %d: RecordsWithAttrs reports %d damaged (%v), Records yields it whole", from, r.Offset, err)
						}
						continue
					}
					a, aerr := r.Attrs()
					if !want.ok || aerr != nil || !bytes.Equal(r.Body, want.body) || !bytes.Equal(a.Group, want.group) {
						t.Fatalf("from %d: RecordsWithAttrs yields %d (%v) unlike Records (whole %v)", from, r.Offset, aerr, want.ok)
					}
				}
				for off, g := range all {
					if g.ok && g.group != nil && !seen[off] {
						t.Fatalf("from %d: record %d has attributes and is whole, RecordsWithAttrs passed over it", from, off)
					}
				}
			}
		})
	}
}

// TestRecordsWithAttrsSkipsChecksums: a record without attributes whose
// body is damaged is stepped over by its header, not reported; a record
// with attributes whose body is damaged is reported.
func TestRecordsWithAttrsSkipsChecksums(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	for i := range 10 {
		var a *Attrs
		if i%2 == 1 {
			a = &Attrs{Group: []byte("g")}
		}
		if _, err := l.AppendWith(bytes.Repeat([]byte{byte(i)}, 100), a); err != nil {
			t.Fatal(err)
		}
	}
	var pos []int64
	for in := range l.Inspect(0) {
		pos = append(pos, in.Position)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := segPath(dir, 0, segment.LogSuffix)
	patch(t, path, pos[4]+40, []byte{0xAA}) // plain
	patch(t, path, pos[5]+40, []byte{0xAA}) // with attributes
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	var offs []uint64
	for r, err := range l.RecordsWithAttrs(0) {
		if r.Offset == 5 {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("damaged record 5 with attributes: %v, want ErrCorrupt", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		offs = append(offs, r.Offset)
	}
	// The first record is read to learn where the scan is, and so is the
	// one after the damage; else only the records with attributes.
	if fmt.Sprint(offs) != "[0 1 3 6 7 9]" {
		t.Fatalf("RecordsWithAttrs yields %v whole, want [0 1 3 6 7 9]", offs)
	}
}
