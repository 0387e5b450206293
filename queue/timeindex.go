package queue

import (
	"time"
)

// appendTime estimates when the record at off was appended, from the log's
// time index (one entry per IndexIntervalBytes, stamped by the system clock
// at append; Log.OffsetForTime is the only way in): the time of the first
// entry at or after off, the younger neighbour, within one index interval
// of records of the truth. A record after the newest entry gets that
// entry's time. ok is false when the log has no entry at all.
func appendTime(l recordLog, off uint64) (time.Time, bool) {
	now := time.Now().UnixMilli() + 1
	at := func(ms int64) uint64 {
		o, err := l.OffsetForTime(time.UnixMilli(ms))
		if err != nil {
			return 0
		}
		return o
	}
	last := at(now) // one past the newest entry's record
	if last <= l.First() {
		return time.Time{}, false
	}
	target := max(off, l.First())
	if last <= off {
		target = last - 1 // after the newest entry: that entry's time
	}
	// The smallest ms at which at(ms) > target: the entry's time is ms-1.
	lo, hi := int64(0), now
	for lo < hi {
		mid := lo + (hi-lo)/2
		if at(mid) > target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return time.UnixMilli(lo - 1), true
}
