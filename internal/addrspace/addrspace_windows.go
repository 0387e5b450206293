package addrspace

import (
	"errors"
	"fmt"
	"os"
)

// Windows is not supported yet (engine.Open refuses first): a Pool maps
// nothing there.

var errWindows = fmt.Errorf("addrspace: Windows is not supported yet: %w", errors.ErrUnsupported)

// A Pool owns address ranges.
type Pool struct{}

// For returns the pool of key.
func For(key string) *Pool { return &Pool{} }

func (p *Pool) Map(f *os.File, size int) ([]byte, error)         { return nil, errWindows }
func (p *Pool) Retire(b []byte) error                            { return errWindows }
func (p *Pool) Done()                                            {}
func (p *Pool) ZeroFrom(b []byte, from int) error                { return errWindows }
func (p *Pool) MapFrom(b []byte, f *os.File, from, to int) error { return errWindows }
func (p *Pool) Reserved() int                                    { return 0 }

// SetIdleBudget: nothing is mapped here.
func SetIdleBudget(n int) (old int) { return 0 }
