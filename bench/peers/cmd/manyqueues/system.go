package main

import "fmt"

// system is one way of keeping many queues, as one child process drives it.
type system struct {
	name  string
	setup string // how it is driven, printed under the table
	// receive says whether the system has a receive+delete; without one the
	// spread receive is not measured.
	receive bool
	// open starts the system on dir (an embedded server, a database file, a
	// store) without touching any queue; for one-directory-per-queue systems
	// it only records dir.
	open func(dir string) (instance, error)
}

// instance is a system opened on one data directory. Queues are numbered
// 0..n-1; qname gives the name each system files them under.
type instance interface {
	// create makes queue i and sends its first message (firstBytes long).
	create(i int, first []byte) error
	// touch makes queue i usable again after a restart (opens it, or looks
	// it up) and returns how many messages it holds: the reopen path, which
	// must not create anything.
	touch(i int) (int64, error)
	// send appends body to queue i.
	send(i int, body []byte) error
	// receive takes queue i's oldest message and deletes it; the caller
	// knows one is there.
	receive(i int) error
	// close closes every queue and the system.
	close() error
}

// systems is the table of systems, in the order they run. An entry is nil
// when its build leaves it out.
var systems = []*system{
	jetstreamStreamsSystem(),
	jetstreamSubjectsSystem(),
	diskqueueSystem(),
	bboltSystem(),
	pagelogDirsSystem(),
	// "pagelog store": queue.OpenStore then Store.Queue per name, all the
	// queues in one directory (sys_store.go).
	pagelogStoreSystem,
}

// Message sizes.
const (
	firstBytes = 100  // the message every queue gets when it is made
	sendBytes  = 1024 // the spread sends
)

func qname(i int) string { return fmt.Sprintf("q%06d", i) }

// sink keeps received bodies observable so reads are not optimised away.
var sink byte

// check verifies a received body's length and reads one byte of it.
func check(b []byte) error {
	if len(b) != firstBytes && len(b) != sendBytes {
		return fmt.Errorf("received %d bytes, want %d or %d", len(b), firstBytes, sendBytes)
	}
	sink += b[0]
	return nil
}
