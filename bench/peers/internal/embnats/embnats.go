// Package embnats starts an embedded nats-server with JetStream and a
// client connected to it in-process, for the peer benchmarks.
package embnats

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Instance is an embedded server and an in-process client.
type Instance struct {
	Srv *server.Server
	NC  *nats.Conn
	JS  jetstream.JetStream
}

// Start starts a server whose JetStream file store is in dir (host
// 127.0.0.1, random port, DontListen: the client connects in-process with
// nats.InProcessServer). syncAlways makes the store fsync every message
// before its PubAck; otherwise the server's default (SyncInterval, 2 min).
// The server must be ready within 10 s.
func Start(dir string, syncAlways bool) (*Instance, error) {
	return StartWait(dir, syncAlways, 10*time.Second)
}

// StartWait is Start with the time the server has to become ready, which
// includes recovering every stream already in dir.
func StartWait(dir string, syncAlways bool, ready time.Duration) (*Instance, error) {
	opts := &server.Options{
		ServerName:         "peerbench",
		Host:               "127.0.0.1",
		Port:               server.RANDOM_PORT,
		DontListen:         true,
		NoLog:              true,
		NoSigs:             true,
		JetStream:          true,
		StoreDir:           dir,
		SyncAlways:         syncAlways,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  64 << 30,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(ready) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats-server not ready after %v", ready)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	return &Instance{Srv: srv, NC: nc, JS: js}, nil
}

// Close closes the client and shuts the server down.
func (n *Instance) Close() error {
	n.NC.Close()
	n.Srv.Shutdown()
	n.Srv.WaitForShutdown()
	return nil
}
