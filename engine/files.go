package engine

import (
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/internal/segment"
)

// removeSegmentFiles removes the three files of the segment at base: the
// index files first, then the .log. A crash in between leaves a segment
// without its indexes (a cache, rebuilt when needed), never index files
// without their segment, and a reader that lists the directory meanwhile
// never mistakes a half-removed segment for a leftover.
func removeSegmentFiles(dir string, base uint64) {
	for _, suffix := range []string{segment.TimeIndexSuffix, segment.IndexSuffix, segment.LogSuffix} {
		_ = os.Remove(filepath.Join(dir, segment.Name(base, suffix)))
	}
}
