package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
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
	Damaged        []Damage      // damaged records found and kept (reported, stepped over)

	// View is set for a read-only view of a segment that another process
	// may be appending to: nothing was cut or zeroed, and a tail past End
	// (Cut) may be a record still being written.
	View bool
}

// Damage is a record that failed its checks where a good record must be.
type Damage struct {
	Offset   uint64 // the id expected there
	Position int64
	Reason   string
}

// entryAt reports whether the record at pos is whole, verifies and has id:
// the test an index entry must pass to be trusted.
func (s *Segment) entryAt(src source, pos int64, id uint64) bool {
	v, err := s.decodeAt(src, pos)
	return err == nil && v.ID == id
}

// decodeAt verifies and decodes the record at pos of src. It reads at most
// one record of the largest size the log allows.
func (s *Segment) decodeAt(src source, pos int64) (record.View, error) {
	hdr := src.at(pos, 4)
	if len(hdr) < 4 {
		if allZero(hdr) {
			return record.View{}, record.ErrEnd
		}
		return record.View{}, fmt.Errorf("%w: fewer than 4 bytes, no length field", ErrCorrupt)
	}
	n := int64(binary.BigEndian.Uint32(hdr)&record.LengthMask) + 4
	n = max(4, min(n, int64(s.cfg.MaxLength)+4))
	return record.Decode(src.at(pos, int(n)), s.cfg.MaxLength)
}

// trustedEntries returns how many leading entries of x may be used: entries
// that are well formed in both index files, agree with each other, and of
// which the last points at a record that verifies.
func (s *Segment) trustedEntries(x *index, src source, size int64) int {
	n := min(x.off.Valid(size), x.tim.Valid())
	for i := 0; i < n; i++ {
		rel, _ := x.off.Entry(i)
		if _, trel := x.tim.Entry(i); trel != rel {
			n = i
			break
		}
	}
	for n > 0 {
		rel, pos := x.off.Entry(n - 1)
		if s.entryAt(src, int64(pos), s.base+uint64(rel)) {
			break
		}
		n--
	}
	return n
}

// walkResult is where a walk of verified records stopped.
type walkResult struct {
	last  int64 // position of the last good record
	pos   int64
	next  uint64
	count int
	stop  error // record.ErrEnd at a zero length or at maxNext, or the damage found
}

// walk verifies records from pos (expected id) up to limit, feeding each
// record's size to spacer and calling entry for every record the sparse rule
// gives an index entry. It stops with record.ErrEnd at a zero length field
// and when the next id would be maxNext (the base of the segment after this
// one, when known).
func (s *Segment) walk(src source, pos int64, id uint64, limit int64, maxNext uint64, sp *sparseidx.Spacer, entry func(id uint64, pos int64)) walkResult {
	r := walkResult{pos: pos, next: id, last: -1}
	for r.pos < limit {
		if r.next >= maxNext {
			r.stop = record.ErrEnd
			return r
		}
		if limit-r.pos < 4 {
			if allZeroAt(src, r.pos, limit-r.pos) {
				r.stop = record.ErrEnd // a full segment's last few zero bytes
			} else {
				r.stop = fmt.Errorf("%w: %d bytes at the end, too few for a record", ErrCorrupt, limit-r.pos)
			}
			return r
		}
		v, err := s.decodeAt(limitSource{src, limit}, r.pos)
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

// limitSource bounds a source at limit.
type limitSource struct {
	src   source
	limit int64
}

func (l limitSource) at(pos int64, n int) []byte {
	if pos >= l.limit {
		return nil
	}
	return l.src.at(pos, int(min(int64(n), l.limit-pos)))
}

func (l limitSource) size() int64 { return min(l.src.size(), l.limit) }

// nextGood finds the first record that starts after pos and before reach,
// verifies (src bounds its bytes) and whose id lies in [id, maxID): where
// a walk goes on after damage. It returns -1 when there is none.
func (s *Segment) nextGood(src source, pos int64, id uint64, reach int64, maxID uint64) (int64, uint64) {
	for p := pos + 1; p+record.HeaderSize <= reach; p++ {
		h := src.at(p, record.HeaderSize)
		if len(h) < record.HeaderSize {
			break
		}
		_, _, _, got, _ := record.Header(h)
		if got < id || got >= maxID {
			continue
		}
		if v, err := s.decodeAt(src, p); err == nil && v.ID == got {
			return p, got
		}
	}
	return -1, id
}

// resume finds where a walk of the segment's published bytes (src) goes on
// after damage at pos where id was expected, the way the walk at open did.
func (s *Segment) resume(src source, pos int64, id uint64, maxNext uint64) (int64, uint64) {
	return s.nextGood(src, pos, id, s.reach(pos, int64(len(s.ro))), s.idBound(id, pos, maxNext))
}

// idBound returns the bound of the ids a walk accepts after damage at pos
// where id was expected. In a sealed segment it is the next segment's base;
// in an active one, no more records ahead than one record of the largest
// size past the damage (or past the recovery point) could hold, so that a
// stray id far ahead is not taken for the next record. It does not depend
// on the file's size, which sealing changes.
func (s *Segment) idBound(id uint64, pos int64, maxNext uint64) uint64 {
	if s.wholeReach {
		return maxNext
	}
	span := max(pos, s.rp) + int64(s.cfg.MaxRecord) + record.HeaderSize - pos
	ahead := uint64(span)/record.HeaderSize + 2
	if id >= math.MaxUint64-ahead {
		return maxNext
	}
	return min(maxNext, id+ahead)
}

// reach is how far after damage at pos a walk looks for the next record:
// one record of the largest size past the damage (or past the recovery
// point, below which nothing is cut) in an active segment; the whole file
// in a sealed one. Reads after damage (seek) look exactly as far as the
// walk at open did, so that both find the same records.
func (s *Segment) reach(pos, limit int64) int64 {
	if s.wholeReach {
		return limit
	}
	return min(limit, max(pos, s.rp)+int64(s.cfg.MaxRecord)+record.HeaderSize)
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

// firstID returns the id of the segment's first record when it verifies.
func (s *Segment) firstID(src source) (uint64, bool) {
	v, err := s.decodeAt(src, 0)
	return v.ID, err == nil
}

// misnamed describes a segment whose first record verifies but carries
// another id than the file name says: the file was renamed or copied, and
// serving it would hand out records under the wrong offsets.
func (s *Segment) misnamed(src source) string {
	if id, ok := s.firstID(src); ok && id != s.base {
		return fmt.Sprintf("segment %s starts with id %d, not with its base offset %d (renamed or copied?)",
			Name(s.base, LogSuffix), id, s.base)
	}
	return ""
}

// FirstID returns the id of the segment's first record, if it verifies.
func (s *Segment) FirstID() (uint64, bool) {
	unpin, ok := s.pin()
	if !ok {
		return 0, false
	}
	defer unpin()
	return s.firstID(mapSource(s.ro[:s.end.Load()]))
}

// Misnamed returns why the segment's file name does not match its first
// record ("" when it does).
func (s *Segment) Misnamed() string { return s.misnamedWhy }

// zeroTail makes every byte of the active file past end read as zero, so
// that no stale record beyond a cut can ever look like a successor of a
// record appended later.
func (s *Segment) zeroTail(end int64) error {
	w := s.w
	if end >= w.extent() {
		return nil
	}
	// The partial page at end is cleared through the mapping; whole pages
	// after it are zeroed by the file system without writing them.
	page := int64(mmapfile.PageSize)
	next := min((end+page-1)&^(page-1), w.extent())
	clear(s.rw[end:next])
	if next < w.extent() && fileHasDataAfter(s.f, next) {
		if err := mmapfile.ZeroRange(s.f, next, w.extent()-next); err != nil {
			return fmt.Errorf("segment: zero tail of %s: %w", s.f.Name(), err)
		}
	}
	w.populated = next
	return nil
}

// openMapped opens path for reading and maps all of it.
func openMapped(path string) (*os.File, []byte, error) {
	f, err := regfile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	size, err := mmapfile.Len(st.Size())
	var m []byte
	if err == nil {
		m, err = mmapfile.Map(f, size, false)
	}
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
func (s *Segment) tornAfterEnd(src source, pos, limit int64) bool {
	end := min(limit, pos+int64(s.cfg.MaxRecord)+record.HeaderSize)
	return pos < end && !allZeroAt(src, pos, end-pos)
}

// errNotFinished marks where a walk stopped at a tail that is not damage.
var errNotFinished = errors.New("segment: tail not finished")
