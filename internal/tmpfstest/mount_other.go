//go:build !linux

package tmpfstest

import "errors"

func mount(dir, size string) error { return errors.New("tmpfs mounts are Linux only") }

func unmount(dir string) {}
