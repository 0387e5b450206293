package engine

import (
	"testing"
)

// A segment that a log opened read-only had mapped, then unmapped (the
// map cache evicted it), whose tail the writer cuts (Truncate): the copy
// below the cut is renamed over its name. The records below the cut are
// still the log's; Records from the segment's base must give them all,
// not skip the segment as gone.
func TestTruncateEvictedSegmentKeepsRecordsBelowCut(t *testing.T) {
	r, base, cut := readOnlyEvictedCut(t)
	want := base
	for rec, err := range r.Records(base) {
		if rec.Offset >= cut {
			break
		}
		if err != nil {
			t.Errorf("Records at %d: %v", rec.Offset, err)
			want = rec.Offset + 1
			continue
		}
		if rec.Offset != want {
			t.Fatalf("Records: record %d, want %d", rec.Offset, want)
		}
		want++
	}
	if want < cut {
		t.Errorf("Records: records [%d, %d) below the cut at %d never came; they are in the log", want, cut, cut)
	}
}
