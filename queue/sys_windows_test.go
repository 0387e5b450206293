package queue

import (
	"errors"
	"time"
)

// Windows is not supported yet: these keep the tests building there.

func unixUmask(m int) int                  { return 0 }
func limitAddressSpace(bytes uint64) error { return errors.ErrUnsupported }
func cpuTime() time.Duration               { return 0 }
