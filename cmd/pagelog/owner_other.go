//go:build !linux

package main

// logOwner cannot tell the owner of a log without /proc.
func logOwner(dir string) (pid, mapped int, known bool) { return 0, 0, false }

// storeOwner cannot tell the owner of a store without /proc.
func storeOwner(dir string) (pid, mapped int, known bool) { return 0, 0, false }
