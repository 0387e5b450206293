// Package record is pagelog's record format as pure functions on []byte.
//
// It is the code form of the "Record" and "Attributes section" parts of
// FORMAT.md; the two must agree. All integers are big-endian.
//
// # Record
//
//	byte  size  field
//	0     4     length    uint32. Bits 0-30: how many bytes follow this field.
//	                      Bit 31 (AttrFlag): an attributes section is present.
//	                      A reader clears bit 31 before using the length.
//	4     4     checksum  CRC-32C (Castagnoli) of every byte after this field:
//	                      id, attributes section (if any) and body.
//	8     8     id        the record's offset in the log (uint64)
//	16    ...   attributes section, only when bit 31 is set (see below)
//	...   n     body      the message exactly as sent; may be empty
//
// The smallest record is HeaderSize (16) bytes: empty body, no attributes,
// length field MinLength (12). A length field of 0 is never a record: it
// marks the zero-filled end of a preallocated file (Decode returns ErrEnd).
// A length below MinLength, one that runs past the buffer, or one above the
// log's maximum is damage (ErrCorrupt). The checksum does not cover the
// length field on purpose: a damaged length makes the checksum run over the
// wrong bytes, and fail.
//
// A record is good only if its checksum matches AND its id is the id the
// reader expected at that place. Decode checks the first; the caller compares
// View.ID with the id it expects.
//
// # Attributes section
//
//	2 bytes   section length L (uint16): bytes of entries that follow
//	L bytes   entries, each: key (1 byte), value length (1 byte), value
//
//	key  name      value
//	1    due       int64 Unix milliseconds before which the message must not be handed out
//	2    group     ordering-group id, 1-128 bytes
//	3    dedup     deduplication id, 1-128 bytes
//	4    origin    uint64 offset of the record this one was copied from
//	5    receives  uint32 receive count carried by a copied or moved record
//	6    moved     uint64 offset consumers know a moved message by
//
// Key 0 is invalid. Keys 7-255 are reserved; a reader skips an unknown key
// (forward compatibility). A repeated key, an entry that overruns L, or
// entries that do not fill L exactly make the record damaged. Writers emit
// the known keys in ascending order; readers do not depend on the order.
//
// # Lifetimes and concurrency
//
// Every function here is pure: it reads and writes only the slices it is
// given and keeps no state, so all of them are safe for concurrent use on
// buffers that are not being written at the same time. Decode and
// ParseSection return slices (View.Section, View.Body, Attrs.Group,
// Attrs.Dedup) that alias the input buffer: they are valid exactly as long
// as that buffer is (for a mapped segment, as long as the caller holds its
// reference) and change if it changes. Copy them to keep them longer.
// Encode and Decode do not allocate.
package record

// On-disk format: never change, bump the version instead.
const (
	HeaderSize   = 16           // length(4) + checksum(4) + id(8)
	MinLength    = 12           // smallest value of the length field (id only)
	AttrFlag     = 1 << 31      // bit 31 of the length field
	LengthMask   = AttrFlag - 1 // bits 0-30 of the length field
	MaxAttrValue = 255          // value length is one byte

	// Byte positions inside a record.
	lengthOff   = 0
	checksumOff = 4
	idOff       = 8

	// Attribute keys.
	KeyDue      = 1 // int64 Unix milliseconds
	KeyGroup    = 2 // 1-MaxIDBytes bytes
	KeyDedup    = 3 // 1-MaxIDBytes bytes
	KeyOrigin   = 4 // uint64
	KeyReceives = 5 // uint32
	KeyMoved    = 6 // uint64
	KeyQueue    = 7 // uint32 queue id, uint64 offset in the queue

	// SectionLenSize is the size of the section length L.
	SectionLenSize = 2
	// EntryHeaderSize is the key byte plus the value-length byte.
	EntryHeaderSize = 2
	// MaxIDBytes is the largest group or dedup id.
	MaxIDBytes = 128

	// Value sizes of the fixed-size keys.
	DueSize      = 8
	OriginSize   = 8
	ReceivesSize = 4
	MovedSize    = 8
	QueueSize    = 12

	// MaxSectionSize is the largest attributes section a writer produces:
	// every known key present, group and dedup at MaxIDBytes.
	MaxSectionSize = SectionLenSize +
		EntryHeaderSize + DueSize +
		EntryHeaderSize + MaxIDBytes +
		EntryHeaderSize + MaxIDBytes +
		EntryHeaderSize + OriginSize +
		EntryHeaderSize + ReceivesSize +
		EntryHeaderSize + MovedSize +
		EntryHeaderSize + QueueSize
)
