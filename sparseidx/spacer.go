package sparseidx

// Spacer implements the sparse rule of FORMAT.md: it keeps Count, the bytes
// written since the last entry, starting at 0 for a new segment (use a new
// Spacer, or set Count to 0). Before a record is appended: if Count >
// Interval, the record gets an entry and Count becomes 0; then the record's
// size is added to Count. So the first record of a segment never gets an
// entry.
type Spacer struct {
	Interval int // IndexIntervalBytes from log.meta; negative acts as 0
	Count    int // bytes written since the last entry
}

// Next is called before each record of size bytes (the whole record,
// header included) is appended; it reports whether that record gets an
// index entry, and updates Count.
func (s *Spacer) Next(size int) bool {
	entry := s.Count > max(s.Interval, 0)
	if entry {
		s.Count = 0
	}
	s.Count += size
	return entry
}
