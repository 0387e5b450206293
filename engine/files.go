package engine

import (
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/internal/segment"
)

// removeSegmentFiles removes the three files of the segment at base.
func removeSegmentFiles(dir string, base uint64) {
	for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
		_ = os.Remove(filepath.Join(dir, segment.Name(base, suffix)))
	}
}
