package segment

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/sparseidx"
)

// Info describes one record's place in a segment, for tools.
type Info struct {
	Offset   uint64
	Position int64
	Size     int64  // whole record bytes as its length field says
	Checksum uint32 // as stored
	Err      error  // nil when the record verified
}

// Info returns the place of the record a Scanner returned, good or not.
func (s *Segment) Info(offset uint64, v record.View, pos int64, err error) Info {
	if err == nil {
		return Info{Offset: offset, Position: pos, Size: int64(v.Size), Checksum: v.Checksum}
	}
	// Where the record was not found, or what lies where it should be is
	// another record's header, its size and checksum are unknown (-1, 0).
	in := Info{Offset: offset, Position: pos, Size: -1, Err: err}
	if end := s.end.Load(); pos >= 0 && pos < end {
		length, _, sum, id, ok := record.Header(s.ro[pos:end])
		if ok && id == offset {
			in.Size, in.Checksum = int64(length)+4, sum
		}
	}
	return in
}

// VerifyIndex checks the segment's index files on disk against its
// records and reports every problem in a sentence. It also reports bytes
// after a sealed segment's last record that are not records.
//
// The index is a cache of the log, so what must hold is what makes lookups
// right: every entry names the record it points at (relative offset and
// position), entries and times never go back, the two files agree, and the
// entries are those the sparse rule of FORMAT.md gives for one spacing.
// Any one spacing is accepted: the files of older segments keep the
// spacing they were written with when IndexIntervalBytes changes. The rule
// is not checked across damaged records (whether the writer gave one an
// entry cannot be known). A sealed segment's files hold exactly their
// entries; an active one's may hold zeros, or entries for records appended
// after the view was taken, after them. A view beside a writer may see a
// record before its entries are written: a problem with a view's entries
// is reported only when it stays (see recheckViewEntries).
func (s *Segment) VerifyIndex() []string {
	unpin, ok := s.pin()
	if !ok {
		return nil
	}
	defer unpin()
	// One snapshot of the published records: next first, so that the end
	// loaded after it covers every record below next.
	exact := s.sealed.Load() // sealed before the files are read: they are final
	next := s.next.Load()
	end := s.end.Load()
	recs, spans, tailJunk := s.layout(end, next)
	if s.successor && tailJunk == 0 {
		// A view sees only its records; what follows them is read with
		// pread (the writer may be trimming it).
		tailJunk = s.junkAfter(end)
	}
	var problems []string
	if s.finished() && tailJunk > 0 {
		problems = append(problems, fmt.Sprintf("%s: %d bytes after the last record that are not a record",
			Name(s.base, LogSuffix), tailJunk))
	}
	if !s.present() {
		return problems // dropped, or cut and replaced by Truncate, since the open
	}
	offs, tims, offErr, timErr := s.readIndexFiles()
	if !s.present() || (offErr != nil || timErr != nil) && s.gone() {
		// Dropped or replaced while the files were read (a writer removes
		// the index files first, then the .log): it left the log.
		return problems
	}
	want := s.ruleEntries(recs, spans)
	if !exact && !s.successor {
		// The newest segment, still written: its writer names the
		// index files after the .log, beside its first appends (see
		// Activate). Until then they are not there, which is no
		// problem of the log.
		unnamed := errors.Is(offErr, os.ErrNotExist) || errors.Is(timErr, os.ErrNotExist)
		offErr, timErr = notYetNamed(offErr), notYetNamed(timErr)
		if unnamed && offErr == nil && timErr == nil {
			return problems
		}
	}
	if offErr != nil || timErr != nil {
		for _, e := range []struct {
			err    error
			suffix string
		}{{offErr, IndexSuffix}, {timErr, TimeIndexSuffix}} {
			if e.err != nil && (len(want) > 0 || !errors.Is(e.err, os.ErrNotExist)) {
				problems = append(problems, fmt.Sprintf("%s: %v", Name(s.base, e.suffix), e.err))
			}
		}
		return problems
	}
	// Only a sealed segment's index files are exact: a view's may be a
	// writer's, untrimmed yet, or still growing.
	entryProblems := s.checkEntries(recs, spans, offs, tims, exact, next)
	if len(entryProblems) > 0 && s.activeView && !exact {
		entryProblems = s.recheckViewEntries(recs, spans, next, entryProblems)
	}
	return append(problems, entryProblems...)
}

// recheckViewEntries checks a view's index entries again, a few times
// over about 100 ms, when a first check found a problem (problems), and
// returns the problems of the last check: none as soon as one check finds
// none, or the segment left the log.
//
// A view finds its records by reading the .log, and its writer (in this
// process or another) writes a record's bytes before the record's index
// entries: a view can hold records whose entries are not in the files
// yet, and read the two files on either side of an entry being added. The
// entries of records below the view's end are all written soon after, so
// a problem that stays is one of the files. A view that lost an entry
// costs Verify that wait once.
func (s *Segment) recheckViewEntries(recs []recPlace, spans []damageSpan, next uint64, problems []string) []string {
	const checks = 5
	for range checks {
		time.Sleep(20 * time.Millisecond)
		offs, tims, offErr, timErr := s.readIndexFiles()
		if !s.present() {
			return nil // dropped, or cut and replaced by Truncate
		}
		if offErr != nil || timErr != nil {
			continue // being replaced, or unreadable: the first check stands
		}
		if problems = s.checkEntries(recs, spans, offs, tims, false, next); len(problems) == 0 {
			return nil
		}
	}
	return problems
}

// readIndexFiles reads the segment's two index files by name.
//
// The names of a segment a roll just activated change under the reads:
// its index files keep the prepared names until NameIndexes, which runs
// beside the appends, and once it ran the preparer makes the next
// segment's files under those names. A name chosen before the naming and
// opened after it is another segment's file (empty), or no file. So when
// the naming ran during the reads, both files are read again, under the
// names they keep from then on (the naming runs once: a segment is
// activated before it is published).
func (s *Segment) readIndexFiles() (offs, tims []byte, offErr, timErr error) {
	for {
		pending := s.indexPending.Load()
		offs, offErr = s.readIndexFile(IndexSuffix)
		tims, timErr = s.readIndexFile(TimeIndexSuffix)
		if !pending || s.indexPending.Load() {
			return offs, tims, offErr, timErr
		}
	}
}

// notYetNamed is err, or nil when err says the file is not there.
func notYetNamed(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// junkAfter returns how many bytes the .log file holds after end, when
// any of them is not zero (0 otherwise), reading them with pread.
func (s *Segment) junkAfter(end int64) int64 {
	f, err := regfile.Open(s.path(LogSuffix), os.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !s.sameFile(st) || st.Size() <= end {
		return 0
	}
	if allZeroAt(newFileSource(f), end, st.Size()-end) {
		return 0
	}
	return st.Size() - end
}

// Removed reports whether no file is under the segment's name any more:
// its log dropped it (removed, or renamed for reuse). A file replaced
// under the name (a cut's copy) is not removed.
func (s *Segment) Removed() bool {
	_, err := os.Stat(s.path(LogSuffix))
	return errors.Is(err, os.ErrNotExist)
}

// present reports whether the segment's .log file is still the one it
// opened.
func (s *Segment) present() bool {
	st, err := os.Stat(s.path(LogSuffix))
	return err == nil && (s.fileID == [2]uint64{} || s.sameFile(st))
}

// gone reports whether the segment's .log file was removed since the
// segment was opened, or is being removed: it is checked a few times over
// about 100 ms, since a writer unlinks the index files before the .log and
// may be descheduled in between. A segment that really lost an index file
// costs Verify that wait once.
func (s *Segment) gone() bool {
	const checks = 6
	for i := range checks {
		st, err := os.Stat(s.path(LogSuffix))
		if errors.Is(err, os.ErrNotExist) {
			return true
		}
		if err == nil && s.fileID != [2]uint64{} && !s.sameFile(st) {
			return true // replaced (a cut by Truncate)
		}
		if i < checks-1 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return false
}

// IndexMatchesRule reports whether a sealed segment's offset index file
// holds exactly the entries the sparse rule gives its records under the
// log's configured spacing (VerifyIndex accepts any one spacing; Recover
// uses this to bring every index to the configured one). Active segments
// report true.
func (s *Segment) IndexMatchesRule() bool {
	unpin, ok := s.pin()
	if !ok {
		return true
	}
	defer unpin()
	if !s.sealed.Load() {
		return true
	}
	recs, spans, _ := s.layout(s.end.Load(), s.next.Load())
	var want []byte
	for _, e := range s.ruleEntries(recs, spans) {
		want = appendOffset(want, e.rel, e.pos)
	}
	got, err := s.readIndexFile(IndexSuffix)
	return err == nil && bytes.Equal(got, want) || errors.Is(err, os.ErrNotExist) && len(want) == 0
}

// recPlace is one good record's place in a segment.
type recPlace struct {
	id   uint64
	pos  int64
	size int64
}

// damageSpan is a run of bytes between good records that holds the
// damaged records [fromID, toID).
type damageSpan struct {
	from, to     int64
	fromID, toID uint64
}

// layout walks the segment's published bytes and returns its good records,
// the damaged spans between them, and the bytes after the last record that
// are neither a record nor zeros.
func (s *Segment) layout(end int64, next uint64) ([]recPlace, []damageSpan, int64) {
	src := limitSource{mapSource(s.ro[:end]), end}
	finished := s.finished() // no record may follow the end
	var recs []recPlace
	var spans []damageSpan
	if s.misnamedWhy != "" {
		return nil, nil, 0
	}
	pos, id := int64(0), s.base
	for pos < end {
		if id >= next {
			if !allZeroAt(src, pos, end-pos) {
				return recs, spans, end - pos
			}
			break
		}
		v, err := s.decodeAt(src, pos)
		if err == nil && v.ID == id {
			recs = append(recs, recPlace{id: id, pos: pos, size: int64(v.Size)})
			pos += int64(v.Size)
			id++
			continue
		}
		if errors.Is(err, record.ErrEnd) && allZeroAt(src, pos, end-pos) {
			break
		}
		np, nid := s.resume(src, pos, id, next)
		if np < 0 {
			if finished {
				spans = append(spans, damageSpan{from: pos, to: end, fromID: id, toID: next})
			}
			break
		}
		spans = append(spans, damageSpan{from: pos, to: np, fromID: id, toID: nid})
		pos, id = np, nid
	}
	return recs, spans, 0
}

// ruleEntries returns the entries the sparse rule gives the records under
// the log's configured spacing, where they can be known.
func (s *Segment) ruleEntries(recs []recPlace, spans []damageSpan) []entry {
	var out []entry
	sp := sparseidx.Spacer{Interval: s.cfg.IndexInterval}
	k := 0
	for _, r := range recs {
		for k < len(spans) && spans[k].to <= r.pos {
			sp.Count += int(spans[k].to - spans[k].from)
			k++
		}
		if sp.Next(int(r.size)) {
			out = append(out, entry{uint32(r.id - s.base), uint32(r.pos)})
		}
	}
	return out
}

type entry struct{ rel, pos uint32 }

// checkEntries checks the entries of the index files (offs, tims) against
// the records.
func (s *Segment) checkEntries(recs []recPlace, spans []damageSpan, offs, tims []byte, sealed bool, next uint64) []string {
	oname, tname := Name(s.base, IndexSuffix), Name(s.base, TimeIndexSuffix)
	ox, tx := sparseidx.Offsets{Buf: offs}, sparseidx.Times{Buf: tims}
	var out []string
	// How many entries each file holds: all of a sealed file; up to the
	// first zero entry of an active one.
	// Entries for records past the published end belong to records
	// appended after this view was taken, and the two files may have been
	// read a moment apart: only the entries below the end are compared.
	limit := uint32(min(next-s.base, math.MaxUint32))
	no, nt := ox.Cap(), tx.Cap()
	if !sealed {
		no = leadingEntries(offs, sparseidx.OffsetEntrySize, func(i int) uint32 { r, _ := ox.Entry(i); return r }, limit)
		nt = leadingEntries(tims, sparseidx.TimeEntrySize, func(i int) uint32 { _, r := tx.Entry(i); return r }, limit)
	}
	if sealed && len(offs)%sparseidx.OffsetEntrySize != 0 {
		out = append(out, fmt.Sprintf("%s: %d bytes, not a whole number of %d-byte entries", oname, len(offs), sparseidx.OffsetEntrySize))
	}
	if sealed && len(tims)%sparseidx.TimeEntrySize != 0 {
		out = append(out, fmt.Sprintf("%s: %d bytes, not a whole number of %d-byte entries", tname, len(tims), sparseidx.TimeEntrySize))
	}
	if no != nt {
		out = append(out, fmt.Sprintf("%s: %d entries, %s has %d", tname, nt, oname, no))
	}
	var at []int // index into recs of each checked entry's record, -1 inside a damaged span
	var prevRel, prevPos uint32
	var prevMs int64
	for i := range min(no, nt) {
		rel, pos := ox.Entry(i)
		ms, trel := tx.Entry(i)
		switch {
		case rel == 0 || pos == 0:
			return append(out, fmt.Sprintf("%s: entry %d is (%d, %d): the first record never has an entry", oname, i, rel, pos))
		case i > 0 && (rel <= prevRel || pos <= prevPos):
			return append(out, fmt.Sprintf("%s: entry %d (%d, %d) does not follow entry %d (%d, %d)", oname, i, rel, pos, i-1, prevRel, prevPos))
		case trel != rel:
			return append(out, fmt.Sprintf("%s: entry %d has relative offset %d, %s has %d", tname, i, trel, oname, rel))
		case i > 0 && ms < prevMs:
			return append(out, fmt.Sprintf("%s: entry %d goes back in time (%d < %d)", tname, i, ms, prevMs))
		}
		prevRel, prevPos, prevMs = rel, pos, ms
		j, found := slices.BinarySearchFunc(recs, s.base+uint64(rel), func(r recPlace, id uint64) int { return cmp.Compare(r.id, id) })
		switch {
		case found && recs[j].pos == int64(pos):
			at = append(at, j)
		case inSpan(spans, s.base+uint64(rel), int64(pos)):
			at = append(at, -1)
		case found:
			return append(out, fmt.Sprintf("%s: entry %d is (%d, %d), the record with relative offset %d lies at %d", oname, i, rel, pos, rel, recs[j].pos))
		default:
			return append(out, fmt.Sprintf("%s: entry %d is (%d, %d), and no record with that offset lies there", oname, i, rel, pos))
		}
	}
	if p := spacingProblem(recs, spans, at); p != "" {
		out = append(out, oname+": "+p)
	}
	return out
}

// leadingEntries counts the entries of b before the first all-zero one or
// the first whose relative offset (rel) is limit or more.
func leadingEntries(b []byte, width int, rel func(int) uint32, limit uint32) int {
	n := 0
	for ; (n+1)*width <= len(b); n++ {
		if allZero(b[n*width:(n+1)*width]) || rel(n) >= limit {
			break
		}
	}
	return n
}

func inSpan(spans []damageSpan, id uint64, pos int64) bool {
	for _, d := range spans {
		if id >= d.fromID && id < d.toID && pos >= d.from && pos < d.to {
			return true
		}
	}
	return false
}

// spacingProblem checks that the entries (each given as the index in recs
// of its record, -1 inside a damaged span) are those the sparse rule gives
// for some one spacing I: a record gets an entry exactly when more than I
// bytes were written since the last entry. Each record with a known count c
// of bytes before it since the last entry says I >= c (no entry) or I < c
// (an entry). Counts are unknown from a damaged span to the next entry.
func spacingProblem(recs []recPlace, spans []damageSpan, at []int) string {
	lo, hi := int64(0), int64(math.MaxInt64) // I in [lo, hi)
	var loWhy, hiWhy string
	has := make(map[int]bool, len(at))
	for _, j := range at {
		if j >= 0 {
			has[j] = true
		}
	}
	count, known := int64(0), true
	k := 0
	entries := at
	for j, r := range recs {
		for k < len(spans) && spans[k].to <= r.pos {
			known = false
			k++
		}
		// An entry inside a damaged span before this record resets the
		// count at a place that cannot be measured.
		for len(entries) > 0 && entries[0] < 0 {
			entries = entries[1:]
			known = false
		}
		if has[j] {
			if known && count < hi {
				hi, hiWhy = count, fmt.Sprintf("the record at position %d has an entry after %d bytes", r.pos, count)
			}
			entries = entries[1:]
			count, known = 0, true
		} else if known && count > lo && j > 0 {
			lo, loWhy = count, fmt.Sprintf("the record at position %d has none after %d bytes", r.pos, count)
		}
		count += r.size
	}
	if lo >= hi {
		return "entries do not follow the sparse rule for any one spacing: " + hiWhy + ", but " + loWhy
	}
	return ""
}

// LongestBody returns the largest body, attributes section included, among
// the records the segment holds, read from their length fields (the
// checksums are not checked; damage is stepped over). A log whose stored
// settings were lost bounds MaxRecordBytes by it.
func (s *Segment) LongestBody() int {
	unpin, ok := s.pin()
	if !ok {
		return 0
	}
	defer unpin()
	s.lookupIndex()
	end := s.end.Load()
	src := limitSource{mapSource(s.ro[:end]), end}
	next := s.next.Load()
	longest := 0
	pos, id := int64(0), s.base
	for pos+record.HeaderSize <= end && id < next {
		length, _, _, got, _ := record.Header(src.at(pos, record.HeaderSize))
		if length >= record.MinLength && got == id && pos+int64(length)+4 <= end {
			longest = max(longest, int(length-record.MinLength))
			pos += int64(length) + 4
			id++
			continue
		}
		if length == 0 && allZeroAt(src, pos, end-pos) {
			break
		}
		np, nid := s.resume(src, pos, id, next)
		if np < 0 {
			break
		}
		pos, id = np, nid
	}
	return longest
}
