package rqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The commands of the raft log. Each entry's data is one command: a kind
// byte, then its fields as unsigned varints (uv) and length-prefixed byte
// strings (bytes = uv length, then the bytes):
//
//	send:         kind 1, uv count, count x (uv due in Unix ms (0: none), bytes group, bytes body)
//	delete:       kind 2, uv count, count x uv id
//	announce:     kind 3, bytes node id, bytes HTTP address
//	send to:      kind 4, bytes queue name, then a send's fields after its kind
//	delete from:  kind 5, bytes queue name, then a delete's fields after its kind
//	create queue: kind 6, bytes queue name
//	drop queue:   kind 7, bytes queue name
//
// Kinds 1 and 2 (the only ones before named queues) act on the default
// queue, DefaultQueue; the node still proposes them for it, so that nodes
// of an older version apply a cluster's default-queue traffic. A send's
// messages get consecutive ids from the FSM's next id on (one sequence
// for every queue: an id names one message of one queue, never reused,
// not even by a queue dropped and created again); the due time is fixed
// by the node that proposes it, so that every node applies the same one.
// A send to a queue the FSM lacks creates it. An announce records a
// node's HTTP address, so that a follower can name the leader's.
const (
	cmdSend        = 1
	cmdDelete      = 2
	cmdAnnounce    = 3
	cmdSendTo      = 4
	cmdDeleteFrom  = 5
	cmdCreateQueue = 6
	cmdDropQueue   = 7
)

// errBadCommand: an entry's data is not a command this package wrote.
var errBadCommand = errors.New("rqueue: malformed command")

// Outgoing is a message to send.
type Outgoing struct {
	Body  []byte
	Due   int64  // Unix milliseconds; 0: ready at once
	Group string // ordering group; "" for none
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func encodeSend(msgs []Outgoing) []byte { return encodeSendTo(DefaultQueue, msgs) }

// encodeSendTo encodes a send to the queue name: kind 1 for the default
// queue, kind 4 for the others.
func encodeSendTo(name string, msgs []Outgoing) []byte {
	n := 1 + 2*binary.MaxVarintLen64 + len(name)
	for _, m := range msgs {
		n += 3*binary.MaxVarintLen64 + len(m.Group) + len(m.Body)
	}
	b := make([]byte, 0, n)
	if name == DefaultQueue {
		b = append(b, cmdSend)
	} else {
		b = appendBytes(append(b, cmdSendTo), []byte(name))
	}
	b = binary.AppendUvarint(b, uint64(len(msgs)))
	for _, m := range msgs {
		b = binary.AppendUvarint(b, uint64(m.Due))
		b = appendBytes(b, []byte(m.Group))
		b = appendBytes(b, m.Body)
	}
	return b
}

func encodeDelete(ids []uint64) []byte { return encodeDeleteFrom(DefaultQueue, ids) }

// encodeDeleteFrom encodes a delete of ids of the queue name: kind 2 for
// the default queue, kind 5 for the others.
func encodeDeleteFrom(name string, ids []uint64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64*(2+len(ids))+len(name))
	if name == DefaultQueue {
		b = append(b, cmdDelete)
	} else {
		b = appendBytes(append(b, cmdDeleteFrom), []byte(name))
	}
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

func encodeAnnounce(id, addr string) []byte {
	b := []byte{cmdAnnounce}
	b = appendBytes(b, []byte(id))
	return appendBytes(b, []byte(addr))
}

// encodeQueueOp encodes a create queue (kind 6) or drop queue (kind 7).
func encodeQueueOp(kind byte, name string) []byte {
	return appendBytes([]byte{kind}, []byte(name))
}

// reader decodes a command; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uv() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint", errBadCommand)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns a slice of the entry's data (no copy).
func (r *reader) bytes() []byte {
	n := r.uv()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: a length of %d with %d bytes left", errBadCommand, n, len(r.b))
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// count reads a count of items each at least min bytes long, so that a
// damaged count cannot make the decoder allocate more than the data holds.
func (r *reader) count(min int) int {
	n := r.uv()
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.err = fmt.Errorf("%w: a count of %d with %d bytes left", errBadCommand, n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the command", errBadCommand, len(r.b))
	}
	return r.err
}

// decodeName splits the queue name off the data of a command of kind 4
// to 7.
func decodeName(b []byte) (name string, rest []byte, err error) {
	r := reader{b: b}
	name = string(r.bytes())
	return name, r.b, r.err
}

func decodeSend(b []byte) ([]Outgoing, error) {
	r := reader{b: b}
	msgs := make([]Outgoing, r.count(3))
	for i := range msgs {
		due := r.uv()
		if due > 1<<62 {
			r.err = fmt.Errorf("%w: due time %d out of range", errBadCommand, due)
		}
		msgs[i] = Outgoing{Due: int64(due), Group: string(r.bytes()), Body: r.bytes()}
	}
	return msgs, r.end()
}

func decodeDelete(b []byte) ([]uint64, error) {
	r := reader{b: b}
	ids := make([]uint64, r.count(1))
	for i := range ids {
		ids[i] = r.uv()
	}
	return ids, r.end()
}

func decodeAnnounce(b []byte) (id, addr string, err error) {
	r := reader{b: b}
	id, addr = string(r.bytes()), string(r.bytes())
	return id, addr, r.end()
}
