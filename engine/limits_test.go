package engine

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// maxIntervalHere is the largest IndexIntervalBytes an int holds in this
// process: 2^32-1, or 2^31-1 in a 32-bit one.
const maxIntervalHere = min(maxIndexInterval, math.MaxInt)

// intervalOverLimit is an IndexIntervalBytes that Open refuses: 2^32, or,
// where an int cannot hold it (32 bits), -1.
func intervalOverLimit() int {
	over := int64(maxIndexInterval) + 1
	if over > math.MaxInt {
		return -1
	}
	return int(over)
}

// The limits this process applies are those mappingLimits gives for its
// word size, and in a 32-bit process the defaults fit its address space:
// the default sealed segments kept mapped, plus an active segment of the
// largest size mapped twice, take at most 3 GiB (a 32-bit kernel's user
// address space; 4 GiB under a 64-bit kernel).
func TestMappingLimitsFitTheAddressSpace(t *testing.T) {
	seg, rec, mapped := mappingLimits(strconv.IntSize)
	if seg != maxSegmentBytesHere || rec != maxRecordBytesHere || mapped != DefaultMaxMappedSegments {
		t.Fatalf("mappingLimits(%d) = %d, %d, %d; the constants say %d, %d, %d",
			strconv.IntSize, seg, rec, mapped, int64(maxSegmentBytesHere), maxRecordBytesHere, DefaultMaxMappedSegments)
	}
	seg, rec, mapped = mappingLimits(32)
	if int64(rec)+512 > seg {
		t.Errorf("32-bit: records of %d bytes do not fit segments of %d", rec, seg)
	}
	if need := int64(mapped)*DefaultSegmentBytes + 2*seg; need > 3<<30 {
		t.Errorf("32-bit: %d default segments mapped plus an active segment of %d bytes need %d bytes of address space, more than 3 GiB",
			mapped, seg, need)
	}
	if seg > math.MaxInt32 {
		t.Errorf("32-bit: a segment of %d bytes cannot be mapped by one int-sized length", seg)
	}
	if seg64, _, mapped64 := mappingLimits(64); seg64 != MaxSegmentBytes || mapped64 != 128 {
		t.Errorf("64-bit: mappingLimits = %d, %d; want MaxSegmentBytes and 128", seg64, mapped64)
	}
}

// A log whose stored settings need larger mappings than the process can
// make (a 64-bit machine's log of 2 GiB segments, opened by a 32-bit
// process) is refused with an error matching ErrAddressSpace that names
// the settings; a 64-bit process opens it.
func TestOpenRefusesSegmentsLargerThanTheProcessMaps(t *testing.T) {
	m := defaultMeta()
	m.SegmentBytes = 2 << 30
	err := checkMappable(m, 32)
	if !errors.Is(err, ErrAddressSpace) || !strings.Contains(err.Error(), "SegmentBytes 2147483648") || !strings.Contains(err.Error(), "32-bit") {
		t.Errorf("32-bit, 2 GiB segments: %v; want ErrAddressSpace naming the setting", err)
	}
	if err := checkMappable(m, 64); err != nil {
		t.Errorf("64-bit, 2 GiB segments: %v", err)
	}
	m = defaultMeta()
	m.MaxRecordBytes = 1 << 30
	if err := checkMappable(m, 32); !errors.Is(err, ErrAddressSpace) {
		t.Errorf("32-bit, records of 1 GiB: %v; want ErrAddressSpace", err)
	}
	if err := checkMappable(defaultMeta(), 32); err != nil {
		t.Errorf("32-bit, the defaults: %v", err)
	}
}

// log.meta's 4-byte IndexIntervalBytes becomes an int without wrapping:
// in a 32-bit process an interval of 2^31 or more (one entry per segment
// there) is read as the largest int, never as a negative number.
func TestIndexIntervalFromMetaNeverWraps(t *testing.T) {
	for _, c := range []struct {
		v      uint32
		maxInt int64
		want   int64
	}{
		{4096, math.MaxInt32, 4096},
		{math.MaxInt32, math.MaxInt32, math.MaxInt32},
		{math.MaxInt32 + 1, math.MaxInt32, math.MaxInt32},
		{math.MaxUint32, math.MaxInt32, math.MaxInt32},
		{math.MaxUint32, math.MaxInt64, math.MaxUint32},
	} {
		got := intervalFromMeta(c.v, min(c.maxInt, math.MaxInt))
		if int64(got) != min(c.want, math.MaxInt) || got < 0 {
			t.Errorf("intervalFromMeta(%d, %d) = %d, want %d", c.v, c.maxInt, got, c.want)
		}
	}
}
