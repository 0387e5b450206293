package record_test

import (
	"errors"
	"fmt"

	"github.com/pagelog/pagelog/internal/record"
)

func Example() {
	// A writer encodes into a buffer it owns (a mapped segment, say).
	a := &record.Attrs{Group: []byte("tenant-7"), Receives: 2, HasReceives: true}
	body := []byte(`{"order":4127}`)
	buf := make([]byte, 256) // zero-filled: a preallocated tail
	n, err := record.Encode(buf, 1268410, a, body)
	if err != nil {
		panic(err)
	}
	fmt.Println("size", n, "=", record.Size(len(body), a))

	// A reader walks records until the zero tail, checking each id.
	want := uint64(1268410)
	for pos := 0; ; {
		v, err := record.Decode(buf[pos:], record.MaxLength(1<<20))
		if err == record.ErrEnd {
			fmt.Println("end at", pos)
			break
		}
		if err != nil || v.ID != want {
			fmt.Println("damage at", pos)
			break
		}
		attrs, _ := v.Attrs()
		fmt.Printf("id %d body %s group %s receives %d\n", v.ID, v.Body, attrs.Group, attrs.Receives)
		pos += v.Size
		want++
	}

	// One flipped bit is caught by the checksum.
	buf[n-2] ^= 1
	_, err = record.Decode(buf, 0)
	fmt.Println(errors.Is(err, record.ErrCorrupt), err)
	// Output:
	// size 48 = 48
	// id 1268410 body {"order":4127} group tenant-7 receives 2
	// end at 48
	// true pagelog: corrupt record: checksum mismatch
}
