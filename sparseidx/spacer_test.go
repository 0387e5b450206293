package sparseidx

import "testing"

// TestSpacerFormatExample reproduces the example of FORMAT.md: entry 23,371
// at position 23,956,421; records 23,371..23,373 of 1,012 + 1,187 + 903
// bytes; record 23,374 (53 bytes) gets no entry; after record 23,375 (1,064
// bytes) the count is 4,219 > 4,096, so record 23,376 gets the next entry.
func TestSpacerFormatExample(t *testing.T) {
	s := Spacer{Interval: 4096, Count: 4097} // the count before record 23,371
	steps := []struct {
		id, size  int
		entry     bool
		countThen int // Count after Next
	}{
		{23371, 1012, true, 1012},
		{23372, 1187, false, 2199},
		{23373, 903, false, 3102},
		{23374, 53, false, 3155},
		{23375, 1064, false, 4219},
		{23376, 500, true, 500},
	}
	pos := 23956421
	var entries [][2]int
	for _, st := range steps {
		got := s.Next(st.size)
		if got != st.entry {
			t.Fatalf("record %d: entry = %v, want %v (count before %d)", st.id, got, st.entry, s.Count)
		}
		if s.Count != st.countThen {
			t.Fatalf("record %d: count = %d, want %d", st.id, s.Count, st.countThen)
		}
		if got {
			entries = append(entries, [2]int{st.id, pos})
		}
		pos += st.size
	}
	want := [][2]int{{23371, 23956421}, {23376, 23956421 + 1012 + 1187 + 903 + 53 + 1064}}
	if len(entries) != 2 || entries[0] != want[0] || entries[1] != want[1] {
		t.Fatalf("entries %v, want %v", entries, want)
	}
}

func TestSpacerBoundary(t *testing.T) {
	// A count of exactly Interval is not more than Interval.
	s := Spacer{Interval: 4096}
	if s.Next(4096) {
		t.Fatal("first record got an entry")
	}
	if s.Next(16) {
		t.Fatal("count 4096 == interval gave an entry")
	}
	if !s.Next(16) {
		t.Fatal("count 4112 > interval gave no entry")
	}
}

func TestSpacerFirstRecordNeverIndexed(t *testing.T) {
	for _, interval := range []int{-5, 0, 1, 4096, 1 << 30} {
		for _, size := range []int{16, 53, 4097, 1 << 20} {
			s := Spacer{Interval: interval}
			if s.Next(size) {
				t.Errorf("interval %d: first record of %d bytes got an entry", interval, size)
			}
		}
	}
	// Interval 0: every record after the first gets an entry.
	s := Spacer{}
	for i := range 10 {
		if got := s.Next(16); got != (i > 0) {
			t.Fatalf("interval 0, record %d: entry = %v", i, got)
		}
	}
}

// TestSpacerGaps drives a segment of random records through the
// rule and checks no entry is (0, 0) and gaps exceed the interval.
func TestSpacerGaps(t *testing.T) {
	s := Spacer{Interval: 4096}
	pos, last := 0, -1
	for rel := range 20000 {
		size := 16 + (rel*7919)%3000
		if s.Next(size) {
			if rel == 0 || pos == 0 {
				t.Fatalf("entry (%d, %d)", rel, pos)
			}
			if last >= 0 && pos-last <= 4096 {
				t.Fatalf("entry at %d only %d bytes after the previous", pos, pos-last)
			}
			last = pos
		}
		pos += size
	}
	if last < 0 {
		t.Fatal("no entries")
	}
}
