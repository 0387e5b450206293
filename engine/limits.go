package engine

import (
	"fmt"
	"strconv"

	"github.com/pagelog/pagelog/mmapfile"
)

// The address space is a budget. A 64-bit process has more than any log
// maps; a 32-bit one has 4 GiB in all (3 GiB under a 32-bit kernel),
// shared with its heap, stacks and libraries. There an active segment is
// mapped twice (read-only for readers, writable for the writer) and every
// sealed segment a reader touches once, so the defaults and limits are
// smaller: at most 1 GiB per segment mapping, 16 MiB segments by default
// (a queue maps about four segments' worth: its active segment twice,
// the next one prepared, its delete log's), and 8 sealed segments kept
// mapped by default (128 MiB at 16 MiB segments, 2 GiB for the active
// segment's two mappings at the largest segment). Segment
// sizes are the on-disk format's and stay the same, so a log moves
// between a 32-bit and a 64-bit machine; a 32-bit process refuses, with
// an error matching ErrAddressSpace, a log whose stored settings need
// more than it can map.

// is32bit is 1 in a process with 32-bit pointers, 0 otherwise.
const is32bit = (64 - strconv.IntSize) / 32

// ErrAddressSpace: the log needs a mapping larger than this process can
// address (a 32-bit process: segments or records over 1 GiB, or a
// segment file of 2 GiB or more). Nothing was changed.
var ErrAddressSpace = mmapfile.ErrAddressSpace

const (
	// maxSegmentBytesHere is the largest SegmentBytes this process maps.
	maxSegmentBytesHere = MaxSegmentBytes - is32bit*(MaxSegmentBytes-maxSegmentBytes32)
	// maxRecordBytesHere is the largest MaxRecordBytes: a segment must
	// have room for a record of it.
	maxRecordBytesHere = maxBodyLimit - is32bit*(maxBodyLimit-(maxSegmentBytes32-512))

	maxSegmentBytes32 = 1 << 30
)

// mappingLimits returns, for a process whose ints have intSize bits, the
// largest segment it maps and its default count of mapped sealed
// segments: the decisions above as a function, so that a 64-bit test run
// checks the 32-bit ones too.
func mappingLimits(intSize int) (maxSegment int64, maxRecord int, defaultMapped int) {
	if intSize == 32 {
		return maxSegmentBytes32, maxSegmentBytes32 - 512, 8
	}
	return MaxSegmentBytes, maxBodyLimit, 128
}

// checkMappable refuses stored settings that a process whose ints have
// intSize bits cannot map (only a 32-bit process, for a log a 64-bit one
// made with larger segments or records).
func checkMappable(m meta, intSize int) error {
	maxSegment, maxRecord, _ := mappingLimits(intSize)
	if m.SegmentBytes <= maxSegment && m.MaxRecordBytes <= maxRecord {
		return nil
	}
	return fmt.Errorf("%w: the log's SegmentBytes %d and MaxRecordBytes %d; a %d-bit process maps segments of at most %d bytes and records of at most %d",
		ErrAddressSpace, m.SegmentBytes, m.MaxRecordBytes, intSize, maxSegment, maxRecord)
}

// intervalFromMeta converts log.meta's 4-byte IndexIntervalBytes to an
// int whose largest value is maxInt. A 32-bit int holds only up to
// 2^31-1; any interval at least that large there means the same thing as
// 2^31-1 (one index entry per segment, as segments are smaller), so it is
// clamped, not refused.
func intervalFromMeta(v uint32, maxInt int64) int {
	return int(min(int64(v), maxInt))
}
