package tmpfstest

import "golang.org/x/sys/unix"

func mount(dir, size string) error {
	return unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700")
}

func unmount(dir string) { _ = unix.Unmount(dir, unix.MNT_DETACH) }
