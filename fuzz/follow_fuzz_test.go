package fuzz

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// FuzzFollowTorn runs a follower (a read-only Log: Next and Read) against
// a segment file that another goroutine writes the way writers and their
// crashes leave one: records in pieces (front to back, or the body before
// the header, in chunks of the plan's size), some first written torn (a
// prefix of the record, or the whole record with a byte wrong) and then
// zeroed and written again from there, as a writer's restart recovers
// them. The follower must serve exactly the records written whole, each
// with its own bytes, in order, never a torn one, and reach the last.
//
// The plan is read three bytes a record: body size, how it is written
// (chunk size; top bit: body first), and whether it is first torn (and
// where). Seeds: testdata/fuzz/FuzzFollowTorn (followTornSeeds).
func FuzzFollowTorn(f *testing.F) {
	f.Fuzz(func(t *testing.T, plan []byte) {
		followTorn(t, plan)
	})
}

// followStep is one record of a plan.
type followStep struct {
	rec       []byte // the whole record
	chunk     int    // bytes per write
	bodyFirst bool   // the bytes after the 16-byte header go first
	torn      int    // 0: written whole; else bytes of a torn first try
	flip      bool   // the torn try is the whole record with a byte wrong
}

const maxFollowSteps = 48

func followPlan(plan []byte) []followStep {
	var steps []followStep
	for i := 0; i+3 <= len(plan) && len(steps) < maxFollowSteps; i += 3 {
		id := uint64(len(steps))
		size := int(plan[i]) * 13 % 700
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(int(id)*31 + j*7 + 1)
		}
		st := followStep{rec: record.Append(nil, id, nil, body)}
		st.chunk = 1 + int(plan[i+1]&0x7f)
		st.bodyFirst = plan[i+1]&0x80 != 0
		if t := plan[i+2]; t%4 == 0 {
			st.torn = 1 + int(t)%(len(st.rec)-1)
			st.flip = t&0x80 != 0
			if !st.flip && testkit.AllZero(st.rec[st.torn:]) {
				// The prefix and the zeros after it are the whole
				// record: not torn, and a writer's restart keeps it.
				st.torn = 0
			}
		}
		steps = append(steps, st)
	}
	return steps
}

func followTorn(t *testing.T, plan []byte) {
	steps := followPlan(plan)
	dir := t.TempDir()
	// A log with one empty segment, as a writer leaves it: log.meta and a
	// zero-filled .log file. No log.notify: the follower looks at the file.
	w, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"log.notify", "log.clean"} {
		_ = os.Remove(filepath.Join(dir, name))
	}
	f, err := os.OpenFile(filepath.Join(dir, segment.Name(0, segment.LogSuffix)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	writerDone := make(chan error, 1)
	go func() { writerDone <- writeSteps(f, steps) }()

	deadline := time.Now().Add(20 * time.Second)
	for off := uint64(0); off < uint64(len(steps)); {
		if time.Now().After(deadline) {
			t.Fatalf("the follower reached %d of %d records in 20s (Next %d)", off, len(steps), r.Next())
		}
		if off >= r.Next() {
			continue
		}
		rec, err := r.Read(off)
		if err != nil {
			t.Fatalf("Read(%d) below Next %d: %v", off, r.Next(), err)
		}
		want := steps[off].rec[record.HeaderSize:]
		if !bytes.Equal(rec.Body, want) {
			t.Fatalf("record %d: the follower served %d bytes that are not the record's %d", off, len(rec.Body), len(want))
		}
		rec.Release()
		off++
	}
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	if n := r.Next(); n != uint64(len(steps)) {
		t.Fatalf("follower Next %d after %d records", n, len(steps))
	}
}

// writeSteps writes the records of steps one after another at the front of
// f, as the plan says.
func writeSteps(f *os.File, steps []followStep) error {
	pos := int64(0)
	for i, st := range steps {
		if st.torn > 0 {
			try := st.rec[:st.torn]
			if st.flip {
				try = bytes.Clone(st.rec)
				k := 4 + (len(try)-4)/2 // past the length field: the checksum fails
				try[k] ^= 0x40
				// The wrong byte first: a writer never writes a record's
				// right bytes and then a wrong one, and the right bytes
				// before it, with the zeros after them, can be the whole
				// record (an empty body with id 0), which a follower
				// rightly serves.
				if _, err := f.WriteAt(try[k:k+1], pos+int64(k)); err != nil {
					return err
				}
			}
			if err := writeRecord(f, pos, try, st); err != nil {
				return err
			}
			time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			// The restart: what the crash left is zeroed first.
			if _, err := f.WriteAt(make([]byte, len(try)), pos); err != nil {
				return err
			}
		}
		if err := writeRecord(f, pos, st.rec, st); err != nil {
			return err
		}
		pos += int64(len(st.rec))
	}
	return nil
}

// writeRecord writes b at pos in chunks: front to back, or the bytes after
// the header first, then the header.
func writeRecord(f *os.File, pos int64, b []byte, st followStep) error {
	write := func(from, to int) error {
		for p := from; p < to; p += st.chunk {
			if _, err := f.WriteAt(b[p:min(p+st.chunk, to)], pos+int64(p)); err != nil {
				return err
			}
		}
		return nil
	}
	h := min(record.HeaderSize, len(b))
	if st.bodyFirst {
		if err := write(h, len(b)); err != nil {
			return err
		}
		return write(0, h)
	}
	return write(0, len(b))
}

// followTornSeeds are plans for FuzzFollowTorn: whole records only, every
// kind of torn first try, chunks of one byte, body first.
func followTornSeeds(testing.TB) []seed {
	p := func(steps ...[3]byte) []byte {
		var b []byte
		for _, s := range steps {
			b = append(b, s[:]...)
		}
		return b
	}
	many := func(n int, f func(i int) [3]byte) []byte {
		var b []byte
		for i := range n {
			s := f(i)
			b = append(b, s[:]...)
		}
		return b
	}
	s := func(name string, plan []byte) seed { return seed{name, []any{plan}} }
	return []seed{
		s("empty", nil),
		s("one", p([3]byte{10, 127, 1})),
		s("whole", many(20, func(i int) [3]byte { return [3]byte{byte(i * 11), 64, 1} })),
		s("torn-prefix", p([3]byte{40, 16, 1}, [3]byte{50, 8, 4}, [3]byte{60, 127, 1})),
		s("torn-flipped", p([3]byte{40, 16, 1}, [3]byte{50, 8, 0x84}, [3]byte{60, 127, 1})),
		s("torn-header", p([3]byte{40, 16, 1}, [3]byte{50, 3, 8}, [3]byte{0, 1, 1})),
		s("body-first", many(12, func(i int) [3]byte { return [3]byte{byte(30 + i), 0x80 | byte(i*5), byte(i % 5)} })),
		s("byte-by-byte", many(6, func(i int) [3]byte { return [3]byte{byte(i * 40), 0, 1} })),
		s("empty-bodies", many(10, func(i int) [3]byte { return [3]byte{0, byte(i), byte(4 * i)} })),
		s("all-torn", many(16, func(i int) [3]byte { return [3]byte{byte(17 * i), byte(0x80*(i%2) + i), byte(4*i) | 0x80*byte(i%2)} })),
	}
}
