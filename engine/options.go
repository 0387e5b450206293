package engine

import (
	"fmt"
	"math"
	"os"
	"time"
)

// SyncPolicy says when Append reports success.
type SyncPolicy int

const (
	// SyncNone: OK once the record is in the page cache. Survives a crash
	// of the process (kill -9), not a power failure. The default.
	SyncNone SyncPolicy = iota
	// SyncAlways: OK only after an fdatasync that covers the record.
	// Concurrent appends share one fdatasync (group commit).
	SyncAlways
	// SyncInterval: OK at once; a background fdatasync runs every
	// Options.SyncInterval, which bounds the loss window on power failure.
	SyncInterval
)

// String returns the policy's name as the CLI spells it.
func (p SyncPolicy) String() string {
	switch p {
	case SyncNone:
		return "none"
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// ParseSyncPolicy parses "none", "always" or "interval".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	for _, p := range []SyncPolicy{SyncNone, SyncAlways, SyncInterval} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown sync policy %q (want none, always or interval)", ErrBadOptions, s)
}

// Defaults.
const (
	// DefaultSegmentBytes is 64 MiB in a 64-bit process and 16 MiB in a
	// 32-bit one: an open log maps its active segment twice and prepares
	// the next, and a 32-bit process has 4 GiB in all (see limits.go).
	DefaultSegmentBytes       = 64<<20 - is32bit*(48<<20)
	DefaultIndexIntervalBytes = 4096
	DefaultMaxRecordBytes     = 1 << 20
	DefaultSyncInterval       = 100 * time.Millisecond
	// DefaultMaxMappedSegments is 128 in a 64-bit process and 8 in a
	// 32-bit one, whose whole address space is 4 GiB (see limits.go).
	DefaultMaxMappedSegments = 128 - 120*is32bit
	// MaxSegmentBytes: positions are 4-byte fields in the index.
	MaxSegmentBytes = 1<<32 - 1
)

// Options configure a Log. The zero value means the defaults; for an
// existing log, zero fields mean "as stored in log.meta".
type Options struct {
	SegmentBytes       int64      // roll size of a segment; default 64 MiB (16 MiB in a 32-bit process)
	IndexIntervalBytes int        // bytes between sparse-index entries; default 4096
	MaxRecordBytes     int        // largest body Append accepts; default 1 MiB
	Sync               SyncPolicy // when Append reports success; default SyncNone
	SyncInterval       time.Duration

	// FirstOffset is the offset of the first record of a new log. It is
	// ignored when the log already exists.
	FirstOffset uint64

	// ReadOnly opens the log without a lock and writes nothing: no index
	// repair, no log.meta, no truncation. Readers see the records that
	// were whole when Open ran.
	ReadOnly bool

	// FileMode and DirMode are the permissions of created files and
	// directories; defaults 0600 and 0700.
	FileMode os.FileMode
	DirMode  os.FileMode

	// RetireMappings keeps the address range of every segment mapping
	// this Log gives back reserved, as read-only zero pages, instead of
	// unmapping it, and reuses such ranges only for this same log's later
	// mappings (in this process, across opens). It exists for layers that
	// hand out record bodies whose lifetime ends on a clock, not on a
	// Release (the queue's messages, valid until their deadline): a body
	// used after its lifetime by mistake then reads its own bytes, zeros,
	// or a later record of the same log, and never crashes the process.
	// It costs address space up to the log's peak of mapped bytes. After
	// Close the ranges wait for the log's next open while the closed
	// logs of the process hold at most 256 MiB of them (32-bit
	// platforms) or 16 GiB; past that, those closed longest ago give
	// theirs to the logs opened later (a body used after its log was
	// closed may then read another log's bytes; it never faults).
	RetireMappings bool

	// RetentionBytes and RetentionAge drop the oldest sealed segments, whole
	// and through the same path as DropBefore, for a log used as a stream:
	// while its segments' records and index entries take more than
	// RetentionBytes, and while the newest record of the oldest segment
	// (from its time index, or its seal time when it has no entry) is older
	// than RetentionAge. Checked at each roll and at least once a second;
	// the active segment is never dropped, so a log keeps at least its
	// newest segment. Zero means no limit. Reading a dropped offset gives
	// an error matching ErrNotFound (ErrTrimmed). A work queue refuses
	// them: its head decides what goes.
	RetentionBytes int64
	RetentionAge   time.Duration

	// WaitSpin is how long Wait looks for the record without sleeping
	// before it blocks: the lowest latency between an append and a reader
	// that waits for it (in this process or, on a log opened read-only,
	// in another), for a core kept busy meanwhile. Zero blocks at once;
	// negative spins until the record comes or the context ends.
	WaitSpin time.Duration

	// MaxMappedSegments bounds the sealed segments kept mapped at once
	// (default 128; 8 in a 32-bit process): sealed segments are mapped when first read, not at
	// Open, and the least recently used one that no reader holds is
	// unmapped when a new one is mapped, or one is sealed by a roll, past
	// the bound (then mapped again when next read). The active segment,
	// the newest segments of a read-only log, and segments readers still
	// hold come on top, as does a sealed segment while a sync (Sync, or
	// SyncInterval's in the background) writes it back. Each mapped
	// segment costs up to three memory maps (systems limit them:
	// vm.max_map_count). Unmapped sealed segments hold no descriptor
	// either, so open files are bounded with them (RLIMIT_NOFILE).
	MaxMappedSegments int

	// RecycleSegments keeps .log files of segments that DropBefore or
	// retention dropped, up to this many spare files counting the next
	// segment prepared ahead (so 1 takes no disk beyond what the log
	// takes without it), and makes the next segments from them instead
	// of new files: their pages are in the page cache already, so the
	// appender meets no fresh memory (see the append tail in
	// bench/README.md). A next segment already prepared as a new file
	// gives way to a dropped file: it is removed once the kept file is
	// prepared in its place (until then it is one file more, allocated
	// an eighth of a segment at most). A file is reused only once nothing in this
	// process holds its segment; it is made zero first, and never becomes
	// shorter than it was. Zero (the default) reuses nothing; SyncAlways
	// reuses nothing either (the zeros would be the next fdatasync's to
	// write, on an appender's time). Only for a log no other process
	// reads while it runs: a reader in another process that still holds
	// a record of a dropped segment may see its bytes turn to zeros or to
	// newer records (the work queue, which owns its directory, sets it).
	// A log opened read-only reports its later reads of such a segment as
	// dropped (ErrTrimmed), never as damage.
	// Kept files count as the log's disk until reused; Close removes them,
	// and so does an append that finds the disk full, which then takes
	// their space (see Log.ReleaseSpares).
	// A segment that was active when the log was opened keeps the zeros of
	// its allocation when it is sealed (it may be a reused file).
	RecycleSegments int

	// hooks for tests: nil in production.
	allocate func(f *os.File, off, n int64) error
	datasync func(f *os.File) error
	now      func() time.Time
}

func (o Options) withDefaults() Options {
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.FileMode == 0 {
		o.FileMode = 0o600
	}
	if o.MaxMappedSegments == 0 {
		o.MaxMappedSegments = DefaultMaxMappedSegments
	}
	if o.DirMode == 0 {
		o.DirMode = 0o700
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

// Limits of the settings.
const (
	// maxIndexInterval: log.meta stores IndexIntervalBytes in 4 bytes.
	maxIndexInterval = 1<<32 - 1
	// maxOffset is never an offset: the offset after the last record must
	// fit in a uint64, so the last record's id is at most maxOffset - 1.
	maxOffset = math.MaxUint64
)

// validate checks every setting the same way: a range, where 0 means the
// default (or, for an existing log, the stored value).
// Validate reports, with an error matching ErrBadOptions, a setting out of
// its range; Open and OpenReadOnly call it first.
func (o Options) Validate() error { return o.validate() }

func (o Options) validate() error {
	bad := func(name string, v any, hi any, zero string) error {
		return fmt.Errorf("%w: %s %v outside [0, %v] (0: %s)", ErrBadOptions, name, v, hi, zero)
	}
	const stored = "the stored value, or the default for a new log"
	mappable := ""
	if is32bit == 1 {
		mappable = "; a 32-bit process maps at most 1 GiB per segment"
	}
	switch {
	case o.SegmentBytes < 0 || o.SegmentBytes > maxSegmentBytesHere:
		return bad("SegmentBytes", o.SegmentBytes, int64(maxSegmentBytesHere), stored+mappable)
	case o.IndexIntervalBytes < 0 || int64(o.IndexIntervalBytes) > maxIndexInterval:
		return bad("IndexIntervalBytes", o.IndexIntervalBytes, int64(maxIndexInterval), stored)
	case o.MaxRecordBytes < 0 || o.MaxRecordBytes > maxRecordBytesHere:
		return bad("MaxRecordBytes", o.MaxRecordBytes, maxRecordBytesHere, stored+mappable)
	case o.SyncInterval < 0:
		return bad("SyncInterval", o.SyncInterval, time.Duration(math.MaxInt64), "100ms")
	case o.RetentionBytes < 0:
		return bad("RetentionBytes", o.RetentionBytes, int64(math.MaxInt64), "no limit")
	case o.MaxMappedSegments < 0:
		return bad("MaxMappedSegments", o.MaxMappedSegments, math.MaxInt, "128")
	case o.RecycleSegments < 0:
		return bad("RecycleSegments", o.RecycleSegments, math.MaxInt, "none")
	case o.RetentionAge < 0:
		return bad("RetentionAge", o.RetentionAge, time.Duration(math.MaxInt64), "no limit")
	case o.FirstOffset >= maxOffset:
		return fmt.Errorf("%w: FirstOffset %d outside [0, %d] (the last offset is kept free so that the offset after a record always fits)",
			ErrBadOptions, o.FirstOffset, uint64(maxOffset-1))
	case o.Sync < SyncNone || o.Sync > SyncInterval:
		return fmt.Errorf("%w: unknown sync policy %d (want SyncNone, SyncAlways or SyncInterval)", ErrBadOptions, int(o.Sync))
	case o.FileMode&^os.ModePerm != 0:
		return fmt.Errorf("%w: FileMode %v has bits other than permissions", ErrBadOptions, o.FileMode)
	case o.DirMode&^os.ModePerm != 0:
		return fmt.Errorf("%w: DirMode %v has bits other than permissions", ErrBadOptions, o.DirMode)
	}
	return nil
}

// maxBodyLimit keeps a whole record's length field within 31 bits.
const maxBodyLimit = 1<<31 - 1 - 512
