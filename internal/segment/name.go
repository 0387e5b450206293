package segment

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// File name suffixes of the three files of a segment.
const (
	LogSuffix       = ".log"
	IndexSuffix     = ".index"
	TimeIndexSuffix = ".timeindex"
)

// baseDigits is the width of a zero-padded base offset in a file name.
const baseDigits = 20

// Name returns the file name of a segment file: the base offset zero-padded
// to 20 digits, then the suffix.
func Name(base uint64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// ParseName parses a segment file name. ok is false for names that are not
// 20 decimal digits followed by one of the segment suffixes.
func ParseName(name string) (base uint64, suffix string, ok bool) {
	name = filepath.Base(name)
	if len(name) <= baseDigits {
		return 0, "", false
	}
	digits, suffix := name[:baseDigits], name[baseDigits:]
	switch suffix {
	case LogSuffix, IndexSuffix, TimeIndexSuffix:
	default:
		return 0, "", false
	}
	if strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, "", false
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return base, suffix, true
}

// PreparedPrefix is the name of the files of a prepared segment (see
// Prepare): "prepared.log", "prepared.index" and "prepared.timeindex". They
// are not segment files (ParseName refuses them): readers never see them,
// and a writable open removes them as leftovers. The index files of a
// segment just activated keep these names until NameIndexes (see
// Activate).
const PreparedPrefix = "prepared"

func (s *Segment) path(suffix string) string {
	if s.prepared || suffix != LogSuffix && s.indexPending.Load() {
		return filepath.Join(s.cfg.Dir, PreparedPrefix+suffix)
	}
	return filepath.Join(s.cfg.Dir, Name(s.base, suffix))
}
