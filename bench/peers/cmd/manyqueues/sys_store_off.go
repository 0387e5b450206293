//go:build !storebench

package main

// pagelogStoreSystem is nil without the storebench tag: the Store API
// (queue.OpenStore) is not in this build. See sys_store.go.
var pagelogStoreSystem *system
