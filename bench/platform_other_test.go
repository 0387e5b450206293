//go:build !linux

package bench

import (
	"errors"
	"syscall"
)

// dieWithParent: no parent-death signal outside Linux; the writer ends
// when its stdin closes.
func dieWithParent() *syscall.SysProcAttr { return nil }

// watchWrites: no inotify here.
func watchWrites(path string) (wait func() error, err error) {
	return nil, errors.ErrUnsupported
}
