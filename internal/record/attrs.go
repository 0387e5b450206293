package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ErrInvalidAttrs is wrapped by the errors of Attrs.Validate (and so of
// Encode): attributes a writer must not write.
var ErrInvalidAttrs = errors.New("pagelog: invalid attributes")

var (
	errGroupLen = fmt.Errorf("%w: group must be 1-%d bytes", ErrInvalidAttrs, MaxIDBytes)
	errDedupLen = fmt.Errorf("%w: dedup must be 1-%d bytes", ErrInvalidAttrs, MaxIDBytes)
)

// Pre-made ParseSection errors, so that rejecting damage does not allocate.
var (
	errSecShort     = fmt.Errorf("%w: attributes section shorter than its 2-byte length", ErrCorrupt)
	errSecOverrun   = fmt.Errorf("%w: attributes section length runs past the section", ErrCorrupt)
	errSecUnderfill = fmt.Errorf("%w: attribute entries do not fill the section length exactly", ErrCorrupt)
	errKeyZero      = fmt.Errorf("%w: attribute key 0", ErrCorrupt)
	errKeyRepeated  = fmt.Errorf("%w: repeated attribute key", ErrCorrupt)
	errEntryOverrun = fmt.Errorf("%w: attribute entry overruns the section length", ErrCorrupt)
	errDueSize      = fmt.Errorf("%w: due attribute is not %d bytes", ErrCorrupt, DueSize)
	errOriginSize   = fmt.Errorf("%w: origin attribute is not %d bytes", ErrCorrupt, OriginSize)
	errRecvSize     = fmt.Errorf("%w: receives attribute is not %d bytes", ErrCorrupt, ReceivesSize)
	errMovedSize    = fmt.Errorf("%w: moved attribute is not %d bytes", ErrCorrupt, MovedSize)
	errQueueSize    = fmt.Errorf("%w: queue attribute is not %d bytes", ErrCorrupt, QueueSize)
	errGroupBad     = fmt.Errorf("%w: group attribute is not 1-%d bytes", ErrCorrupt, MaxIDBytes)
	errDedupBad     = fmt.Errorf("%w: dedup attribute is not 1-%d bytes", ErrCorrupt, MaxIDBytes)
)

// Attrs are the optional attributes of a record (FORMAT.md, "Attributes
// section"). The Has* flags say whether a fixed-size key is present;
// Group and Dedup are present when non-nil and must then be 1-MaxIDBytes
// bytes long. The zero value (and a nil *Attrs) has no attributes.
type Attrs struct {
	Due         int64 // key 1, Unix milliseconds
	HasDue      bool
	Group       []byte // key 2, 1-128 bytes
	Dedup       []byte // key 3, 1-128 bytes
	Origin      uint64 // key 4
	HasOrigin   bool
	Receives    uint32 // key 5
	HasReceives bool
	Moved       uint64 // key 6
	HasMoved    bool
	// Queue and QueueOffset (key 7) name the queue of a Store that a
	// record of the store's shared logs belongs to, and the record's
	// offset among that queue's records.
	Queue       uint32
	QueueOffset uint64
	HasQueue    bool
}

// Empty reports whether a is nil or sets no attribute. An empty Attrs is
// encoded as no section at all (AttrFlag clear).
func (a *Attrs) Empty() bool {
	return a == nil || !a.HasDue && a.Group == nil && a.Dedup == nil &&
		!a.HasOrigin && !a.HasReceives && !a.HasMoved && !a.HasQueue
}

// Validate reports whether a can be written: Group and Dedup, when
// present, must be 1-MaxIDBytes bytes. The error wraps ErrInvalidAttrs.
// A nil a is valid.
func (a *Attrs) Validate() error {
	if a == nil {
		return nil
	}
	if a.Group != nil && (len(a.Group) == 0 || len(a.Group) > MaxIDBytes) {
		return errGroupLen
	}
	if a.Dedup != nil && (len(a.Dedup) == 0 || len(a.Dedup) > MaxIDBytes) {
		return errDedupLen
	}
	return nil
}

// SectionSize returns the bytes of the whole section including its 2-byte
// length, 0 when a is Empty.
func (a *Attrs) SectionSize() int {
	if a == nil {
		return 0
	}
	n := 0 // the entries; the length field is added when there is one
	if a.HasDue {
		n += EntryHeaderSize + DueSize
	}
	if a.Group != nil {
		n += EntryHeaderSize + len(a.Group)
	}
	if a.Dedup != nil {
		n += EntryHeaderSize + len(a.Dedup)
	}
	if a.HasOrigin {
		n += EntryHeaderSize + OriginSize
	}
	if a.HasReceives {
		n += EntryHeaderSize + ReceivesSize
	}
	if a.HasMoved {
		n += EntryHeaderSize + MovedSize
	}
	if a.HasQueue {
		n += EntryHeaderSize + QueueSize
	}
	if n == 0 {
		return 0 // Empty
	}
	return SectionLenSize + n
}

// AppendSection appends the attributes section of a (2-byte L, then the
// entries with keys in ascending order) to dst; nothing when a is Empty.
// It panics if a is invalid (see Validate).
func AppendSection(dst []byte, a *Attrs) []byte {
	if err := a.Validate(); err != nil {
		panic("record.AppendSection: " + err.Error())
	}
	n := a.SectionSize()
	if n == 0 {
		return dst
	}
	dst = slices.Grow(dst, n)
	start := len(dst)
	dst = dst[:start+n]
	putSection(dst[start:], a)
	return dst
}

// putSection writes the section of a valid, non-empty a into b, of
// exactly a.SectionSize() bytes.
func putSection(b []byte, a *Attrs) {
	if len(b) == queueOnlySection && a.HasQueue {
		// The queue attribute alone (it takes the whole section): every
		// record of a Store's queue with no other attribute.
		binary.BigEndian.PutUint16(b, queueOnlySection-SectionLenSize)
		b[SectionLenSize], b[SectionLenSize+1] = KeyQueue, QueueSize
		binary.BigEndian.PutUint32(b[SectionLenSize+EntryHeaderSize:], a.Queue)
		binary.BigEndian.PutUint64(b[SectionLenSize+EntryHeaderSize+4:], a.QueueOffset)
		return
	}
	binary.BigEndian.PutUint16(b, uint16(len(b)-SectionLenSize)) // b is SectionSize bytes
	p := SectionLenSize
	if a.HasDue {
		p = putFixed(b, p, KeyDue, DueSize)
		binary.BigEndian.PutUint64(b[p:], uint64(a.Due))
		p += DueSize
	}
	if a.Group != nil {
		p = putFixed(b, p, KeyGroup, len(a.Group))
		p += copy(b[p:], a.Group)
	}
	if a.Dedup != nil {
		p = putFixed(b, p, KeyDedup, len(a.Dedup))
		p += copy(b[p:], a.Dedup)
	}
	if a.HasOrigin {
		p = putFixed(b, p, KeyOrigin, OriginSize)
		binary.BigEndian.PutUint64(b[p:], a.Origin)
		p += OriginSize
	}
	if a.HasReceives {
		p = putFixed(b, p, KeyReceives, ReceivesSize)
		binary.BigEndian.PutUint32(b[p:], a.Receives)
		p += ReceivesSize
	}
	if a.HasMoved {
		p = putFixed(b, p, KeyMoved, MovedSize)
		binary.BigEndian.PutUint64(b[p:], a.Moved)
		p += MovedSize
	}
	if a.HasQueue {
		p = putFixed(b, p, KeyQueue, QueueSize)
		binary.BigEndian.PutUint32(b[p:], a.Queue)
		binary.BigEndian.PutUint64(b[p+4:], a.QueueOffset)
	}
}

// putFixed writes an entry header at b[p:] and returns the value position.
func putFixed(b []byte, p int, key byte, size int) int {
	b[p] = key
	b[p+1] = byte(size)
	return p + EntryHeaderSize
}

// ParseSection parses an attributes section: exactly the 2-byte length L
// plus L bytes of entries. Unknown keys (8-255) are skipped. Key 0, a
// repeated key, an entry overrunning L, entries not filling L exactly, a
// fixed-size key with the wrong value size, or a group or dedup of 0 or more
// than MaxIDBytes bytes give an error wrapping ErrCorrupt. Group and Dedup
// are sub-slices of section (no copy). ParseSection does not allocate.
func ParseSection(section []byte) (Attrs, error) {
	var a Attrs
	if len(section) < SectionLenSize {
		return a, errSecShort
	}
	end := SectionLenSize + int(binary.BigEndian.Uint16(section))
	if end > len(section) {
		return a, errSecOverrun
	}
	if end < len(section) {
		return a, errSecUnderfill
	}
	var seen [4]uint64 // one bit per key
	for p := SectionLenSize; p < end; {
		if end-p < EntryHeaderSize {
			return Attrs{}, errEntryOverrun
		}
		key, size := section[p], int(section[p+1])
		p += EntryHeaderSize
		if end-p < size {
			return Attrs{}, errEntryOverrun
		}
		if key == 0 {
			return Attrs{}, errKeyZero
		}
		if seen[key>>6]&(1<<(key&63)) != 0 {
			return Attrs{}, errKeyRepeated
		}
		seen[key>>6] |= 1 << (key & 63)
		if err := a.set(key, section[p:p+size:p+size]); err != nil {
			return Attrs{}, err
		}
		p += size
	}
	return a, nil
}

// set stores the value v of key in a; unknown keys are ignored.
func (a *Attrs) set(key byte, v []byte) error {
	switch key {
	case KeyDue:
		if len(v) != DueSize {
			return errDueSize
		}
		a.Due, a.HasDue = int64(binary.BigEndian.Uint64(v)), true
	case KeyGroup:
		if len(v) == 0 || len(v) > MaxIDBytes {
			return errGroupBad
		}
		a.Group = v
	case KeyDedup:
		if len(v) == 0 || len(v) > MaxIDBytes {
			return errDedupBad
		}
		a.Dedup = v
	case KeyOrigin:
		if len(v) != OriginSize {
			return errOriginSize
		}
		a.Origin, a.HasOrigin = binary.BigEndian.Uint64(v), true
	case KeyReceives:
		if len(v) != ReceivesSize {
			return errRecvSize
		}
		a.Receives, a.HasReceives = binary.BigEndian.Uint32(v), true
	case KeyMoved:
		if len(v) != MovedSize {
			return errMovedSize
		}
		a.Moved, a.HasMoved = binary.BigEndian.Uint64(v), true
	case KeyQueue:
		if len(v) != QueueSize {
			return errQueueSize
		}
		a.Queue, a.QueueOffset, a.HasQueue = binary.BigEndian.Uint32(v), binary.BigEndian.Uint64(v[4:]), true
	}
	return nil
}

// checkSection verifies a section without keeping the result.
func checkSection(section []byte) error {
	if isQueueOnly(section) {
		return nil // the section of every record of a Store's queue with no other attribute
	}
	_, err := ParseSection(section)
	return err
}

// queueOnlySection is the length of a section that holds the queue
// attribute alone.
const queueOnlySection = SectionLenSize + EntryHeaderSize + QueueSize

// isQueueOnly reports whether section is a valid section holding the
// queue attribute alone (ParseSection accepts it), without parsing it.
func isQueueOnly(section []byte) bool {
	return len(section) == queueOnlySection &&
		binary.BigEndian.Uint16(section) == queueOnlySection-SectionLenSize &&
		section[SectionLenSize] == KeyQueue && section[SectionLenSize+1] == QueueSize
}

// SectionNamesQueue reports whether an attributes section (its 2-byte
// length included) of a record whose checksum checked out holds the
// queue attribute (key 7) with queue id and offset off. Writers put the
// entries in ascending key order, so the queue entry is the last of a
// section this version writes: it is compared in place there (the
// checksum vouches for the bytes before it), and the whole section is
// parsed only when it is not (a section with keys above 7, or none). It
// does not allocate.
func SectionNamesQueue(section []byte, id uint32, off uint64) bool {
	names, _ := SectionQueue(section, id, off)
	return names
}

// SectionQueue is SectionNamesQueue that also reports whether the queue
// attribute is all the section holds (only; a section this version
// writes for a Store's queue with no other attribute).
func SectionQueue(section []byte, id uint32, off uint64) (names, only bool) {
	const entry = EntryHeaderSize + QueueSize
	if n := len(section); n >= SectionLenSize+entry && int(binary.BigEndian.Uint16(section)) == n-SectionLenSize {
		e := section[n-entry:]
		if e[0] == KeyQueue && e[1] == QueueSize &&
			binary.BigEndian.Uint32(e[2:]) == id && binary.BigEndian.Uint64(e[6:]) == off {
			// One entry long: the queue's alone (two take more).
			return true, n == queueOnlySection
		}
	}
	a, err := ParseSection(section)
	return err == nil && a.HasQueue && a.Queue == id && a.QueueOffset == off, false
}
