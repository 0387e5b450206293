package engine

import (
	"testing"
)

func TestStats(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 64 << 10, Sync: SyncAlways})
	defer l.Close()
	st := l.Stats()
	if st.Appends != 0 || st.Reads != 0 || st.Segments != 1 || st.First != 0 || st.Next != 0 {
		t.Fatalf("a new log: %+v", st)
	}
	sizes := appendN(t, l, 300, func(uint64) int { return 1000 })
	var bytes uint64
	for _, n := range sizes {
		bytes += uint64(n)
	}
	for off := range uint64(50) {
		r, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	if _, err := l.Read(10_000); err == nil {
		t.Fatal("Read past the end succeeded")
	}
	if _, _, err := l.AppendBatch([][]byte{make([]byte, 10), make([]byte, 20)}, nil); err != nil {
		t.Fatal(err)
	}
	st = l.Stats()
	if st.Appends != 302 || st.AppendedBytes != bytes+2*headerSize+30 {
		t.Fatalf("Appends %d, AppendedBytes %d; want 302, %d", st.Appends, st.AppendedBytes, bytes+2*headerSize+30)
	}
	if st.Reads != 50 {
		t.Fatalf("Reads = %d, want 50 (failed reads do not count)", st.Reads)
	}
	if st.Next != 302 || st.Durable != 302 || st.First != 0 {
		t.Fatalf("offsets: %+v", st)
	}
	if st.Segments < 5 || st.MappedSegments != st.Segments || st.Bytes != int64(st.AppendedBytes) {
		t.Fatalf("segments %d (%d mapped), %d bytes; want >= 5, all mapped, %d bytes", st.Segments, st.MappedSegments, st.Bytes, st.AppendedBytes)
	}
	// SyncAlways: a sync per append at most, the batch sharing one.
	if st.Syncs == 0 || st.Syncs > 301 || st.SyncTime <= 0 || st.LastSyncBatch != 2 {
		t.Fatalf("syncs %d in %v, last batch %d; want 1-301, > 0, 2", st.Syncs, st.SyncTime, st.LastSyncBatch)
	}
	var inHist uint64
	for _, n := range st.SyncLatency {
		inHist += n
	}
	if inHist != st.Syncs {
		t.Fatalf("the latency histogram counts %d syncs, want %d", inHist, st.Syncs)
	}
	if st.SyncErr != nil {
		t.Fatal(st.SyncErr)
	}
	if _, err := l.DropBefore(200); err != nil {
		t.Fatal(err)
	}
	if st2 := l.Stats(); st2.First == 0 || st2.Segments >= st.Segments || st2.Appends != st.Appends {
		t.Fatalf("after DropBefore: %+v", st2)
	}
	// Reads are counted by segment: those of the dropped ones stay, and a
	// Truncate of the newest keeps its reads too.
	for off := uint64(290); off < 300; off++ {
		r, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	if err := l.Truncate(250); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().Reads; got != 60 {
		t.Fatalf("Reads after DropBefore and Truncate: %d, want 60", got)
	}
}
