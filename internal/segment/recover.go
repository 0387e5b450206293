package segment

import (
	"fmt"
	"os"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/mmapfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// Recovery tells what opening a segment found and did.
type Recovery struct {
	Segment        string        // file name of the .log file
	Walked         int64         // bytes of records walked and verified
	Records        int           // records walked and verified
	End            int64         // byte size of the good records
	Next           uint64        // offset after the last good record
	Cut            bool          // a torn tail was found past End
	CutReason      string        // why the walk stopped at End, when Cut
	ZeroedBytes    int64         // bytes past End made zero again
	TornBytes      int64         // of those, bytes up to the last non-zero one: the torn tail cut
	IndexRepaired  bool          // index entries were dropped or added
	EntriesAdded   int           // index entries written by the walk
	EntriesDropped int           // index entries found untrustworthy
	Took           time.Duration // time spent
	Clean          bool          // opened from a clean-close marker, nothing walked
	CleanMismatch  string        // why a clean-close marker was not trusted
	RecoveryPoint  int64         // bytes known synced, below which damage is never cut
	Damaged        []Damage      // damage found below the recovery point (kept, reported)
}

// Damage is a record that failed its checks where a good record must be.
type Damage struct {
	Offset   uint64 // the id expected there
	Position int64
	Reason   string
}

// entryAt reports whether the record at pos is whole, verifies and has id:
// the test an index entry must pass to be trusted.
func (s *Segment) entryAt(buf []byte, pos int64, id uint64) bool {
	if pos < 0 || pos >= int64(len(buf)) {
		return false
	}
	v, err := record.Decode(buf[pos:], s.cfg.MaxLength)
	return err == nil && v.ID == id
}

// trustedEntries returns how many leading entries of x may be used: entries
// that are well formed in both index files, agree with each other, and of
// which the last points at a record that verifies.
func (s *Segment) trustedEntries(x *index, buf []byte) int {
	n := min(x.off.Valid(int64(len(buf))), x.tim.Valid())
	for i := 0; i < n; i++ {
		rel, _ := x.off.Entry(i)
		if _, trel := x.tim.Entry(i); trel != rel {
			n = i
			break
		}
	}
	for n > 0 {
		rel, pos := x.off.Entry(n - 1)
		if s.entryAt(buf, int64(pos), s.base+uint64(rel)) {
			break
		}
		n--
	}
	return n
}

// walkResult is where a walk of verified records stopped.
type walkResult struct {
	last   int64 // position of the last good record
	pos    int64
	next   uint64
	count  int
	stop   error // record.ErrEnd at a zero length, or the damage found
	needed []int64
}

// walk verifies records from pos (expected id) up to limit, feeding each
// record's size to spacer and calling entry for every record the sparse rule
// gives an index entry.
func (s *Segment) walk(buf []byte, pos int64, id uint64, limit int64, sp *sparseidx.Spacer, entry func(id uint64, pos int64)) walkResult {
	r := walkResult{pos: pos, next: id}
	for r.pos < limit {
		if limit-r.pos < 4 && allZero(buf[r.pos:limit]) {
			r.stop = record.ErrEnd // a full segment's last few zero bytes
			return r
		}
		v, err := record.Decode(buf[r.pos:limit], s.cfg.MaxLength)
		if err == nil && v.ID != r.next {
			err = fmt.Errorf("%w: id %d where %d was expected", ErrCorrupt, v.ID, r.next)
		}
		if err != nil {
			r.stop = err
			return r
		}
		if sp.Next(v.Size) && entry != nil {
			entry(r.next, r.pos)
		}
		r.last = r.pos
		r.pos += int64(v.Size)
		r.next++
		r.count++
	}
	return r
}

// clearEntries zeroes index entries from n on, where stale or damaged ones
// may lie, so that the zero entry again marks the end.
func (s *Segment) clearEntries(x *index, n int) {
	for _, tail := range [][]byte{x.offMap[min(n*sparseidx.OffsetEntrySize, len(x.offMap)):], x.timMap[min(n*sparseidx.TimeEntrySize, len(x.timMap)):]} {
		for i, b := range tail {
			if b != 0 {
				clear(tail[i:])
				break
			}
		}
	}
}

// checkFirstID rejects a segment whose first record verifies but carries
// another id than the file name says: the file was renamed or copied, and
// serving it would hand out records under the wrong offsets.
func (s *Segment) checkFirstID(buf []byte) error {
	if len(buf) < record.HeaderSize {
		return nil
	}
	v, err := record.Decode(buf, s.cfg.MaxLength)
	if err == nil && v.ID != s.base {
		return fmt.Errorf("%w: segment %s starts with id %d, not with its base offset",
			ErrCorrupt, Name(s.base, LogSuffix), v.ID)
	}
	return nil
}

// zeroTail makes every byte of the active file past end read as zero, so
// that no stale record beyond a cut can ever look like a successor of a
// record appended later.
func (s *Segment) zeroTail(end int64) error {
	w := s.w
	if end >= w.capacity {
		return nil
	}
	// The partial page at end is cleared through the mapping; whole pages
	// after it are zeroed by the file system without writing them.
	page := int64(mmapfile.PageSize)
	next := min((end+page-1)&^(page-1), w.capacity)
	clear(s.rw[end:next])
	if next < w.capacity && fileHasDataAfter(s.f, next) {
		if err := mmapfile.ZeroRange(s.f, next, w.capacity-next); err != nil {
			return fmt.Errorf("segment: zero tail of %s: %w", s.f.Name(), err)
		}
	}
	w.populated = next
	return nil
}

// openMapped opens path for reading and maps all of it.
func openMapped(path string) (*os.File, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	m, err := mmapfile.Map(f, int(st.Size()), false)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, m, nil
}

// tornAfterEnd reports whether non-zero bytes follow a zero length field at
// pos, within the reach of one record: what a crash in the middle of an
// append leaves (the body is copied before the length field is written).
// The walk stops there as at a clean end; the report must call it a cut.
func (s *Segment) tornAfterEnd(buf []byte, pos int64) bool {
	end := min(int64(len(buf)), pos+int64(s.cfg.MaxRecord)+record.HeaderSize)
	return pos < end && !allZero(buf[pos:end])
}
