package segment

import (
	"fmt"
	"os"

	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/mmapfile"
)

// Recycling reuses the .log file of a segment that the log dropped as the
// file of a next segment (RocksDB's recycle_log_file_num). The pages of a
// file the log wrote lately are in the page cache; a new file's are not,
// and on a virtual machine whose host takes back the memory its guest
// frees (free page reporting), a first touch of fresh memory costs a host
// fault per page: a queue that wrote 4 GiB through 64 MiB segments, each
// new, spent most of its time zeroing fresh memory for them. A reused
// file is made zero through the page cache, which only writes memory the
// guest has, and then reads as a new segment's file does.
//
// A file is reused only once no reference to its segment is left in this
// process (the last Release hands it on) and its mappings are gone. A
// reader in another process that still maps it sees it change; the log's
// Options.RecycleSegments says so. Such a reader never faults: a reused
// file never becomes shorter than it was.

// RecycleTo marks a segment the log has dropped, whose .log file was
// renamed to path, for reuse: once its last reference is gone and nothing
// of the file is mapped in this process, put(path) hands the file on. When
// a mapping could not be taken away, the file is removed instead.
func (s *Segment) RecycleTo(path string, put func(path string)) {
	s.recycleAs, s.recyclePut = path, put
}

// handOn gives a dropped segment's file to its recycler (unmapped: whether
// every mapping of it is gone), at the end of finish.
func (s *Segment) handOn(unmapped bool) {
	path, put := s.recycleAs, s.recyclePut
	if path == "" {
		return
	}
	s.recycleAs, s.recyclePut = "", nil
	if !unmapped {
		_ = os.Remove(path)
		return
	}
	put(path)
}

// PrepareRecycled is Prepare with the .log file at path, one that
// RecycleTo handed on: renamed to the prepared name, its first page made
// zero on disk (zeroHead), fresh index files beside it, mapped, and every
// byte of it made zero through the mapping
// (so that nothing but zeros follows the records, as in a new file, and
// the writer meets pages already resident). On error the file is removed.
func PrepareRecycled(cfg *Config, path string) (*Segment, error) {
	s := &Segment{cfg: cfg, prepared: true}
	for _, suffix := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix} {
		_ = os.Remove(s.path(suffix))
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() == 0 {
		_ = os.Remove(path)
		return nil, fmt.Errorf("segment: recycle %s: size %d, %v", path, sizeOf(st), err)
	}
	if err := os.Rename(path, s.path(LogSuffix)); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("segment: recycle: %w", err)
	}
	if err := zeroHead(cfg, s.path(LogSuffix), st.Size()); err != nil {
		_ = os.Remove(s.path(LogSuffix))
		return nil, fmt.Errorf("segment: recycle: %w", err)
	}
	s.keepSize = st.Size()
	if _, err := create(s); err != nil {
		return nil, err
	}
	size := min(s.w.alloc.Load(), int64(len(s.rw)))
	for at := int64(0); at < size; at += 1 << 20 {
		n := min(1<<20, size-at)
		clear(s.rw[at : at+n])
		touchPages(s.ro, at, n)
		yieldChunk()
	}
	s.w.populated = size
	return s, nil
}

// zeroHead makes the first page of a reused file zero on disk before any
// rename can name it as a segment: the rest is zeroed in the page cache
// only, and a power failure may find a segment name whose file still holds
// the dropped segment's records there. Those records' ids are below the
// segment's base, so nothing past a record written since is trusted; but a
// first record of a lower id would read as a misnamed segment, which no
// open gets past. With a zero length field first, such a file is an empty
// segment with a torn tail, which recovery cuts.
//
// The page is written through a descriptor opened with O_DSYNC, which
// makes that page durable and nothing else. An fdatasync of the file wrote
// back every dirty page of the dropped segment first, records about to be
// zeroed: in a queue's steady state (about 1 GB/s through 64 MiB segments,
// SyncNone) it took 44-84 ms, longer than the half segment the preparer
// has, and every other roll found nothing prepared and made a new file.
// A test's Config.Datasync is still told of the write, as a sync of f.
func zeroHead(cfg *Config, path string, size int64) error {
	f, err := regfile.Open(path, os.O_RDWR|mmapfile.DsyncFlag, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, min(size, int64(mmapfile.PageSize))), 0); err != nil {
		return err
	}
	if cfg.Datasync != nil {
		return cfg.Datasync(f)
	}
	return nil
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return -1
	}
	return st.Size()
}
