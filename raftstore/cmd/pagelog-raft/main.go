// Command pagelog-raft runs one node of a replicated pagelog store of
// queues: raft (hashicorp/raft over its TCP transport) on a raftstore, the
// queues' operations as raft commands (package rqueue), and an HTTP API to
// send, receive and delete, on the queue "default" (/send, ...) or any
// named one (/queues/NAME/send, ...). `pagelog serve --raft FLAGS` runs it with FLAGS.
//
//	pagelog-raft --id n1 --dir /var/lib/q/n1 --http 127.0.0.1:8001 \
//	    --peers n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003
//
// Every node is started with the same --peers; a node with no raft state
// yet bootstraps the cluster with them (raft allows every node to do so
// with the same configuration); a node with state refuses --peers that
// disagree with its stored configuration, and a directory first used by
// another --id refuses to start. The routes are those of rqueue's
// Node.Handler, behind the timeouts, connection bound, TLS and bearer token
// of internal/httpserve (none of which authenticates anyone by default).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/internal/httpserve"
	"github.com/pagelog/pagelog/queue"
	"github.com/pagelog/pagelog/raftstore/rqueue"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: pagelog serve --raft --id ID --dir D --peers ID=HOST:PORT,... [--http ADDR] [flags]
       (or pagelog-raft with the same flags)

Runs one node of a replicated queue: raft over TCP between the nodes named
in --peers (the same list on every node), the node's files in D (raft's
log and vote, snapshots, the local queue), and an HTTP API on --http:

  POST /send        {"body":"text"} or {"body64":"..."}, optional "delay", "group";
                    or {"messages":[...]}                  -> {"ids":[...]}
                    ("delay" at most queue.MaxDelay, 8760h: one year)
  POST /receive     ?wait=5s  (leader only)                -> {"id","body","receives","deadline"} or 204
  POST /delete      {"ids":[...]}                          -> {"deleted":N}
  POST /visibility  {"id":N,"timeout":"30s"}               -> {}
  GET  /status, GET /digest

Those act on the queue "default". Any other queue NAME (created by its
first send, or by PUT) has the same routes under /queues/NAME:

  POST   /queues/NAME/send, /queues/NAME/receive, /queues/NAME/delete,
         /queues/NAME/visibility                         (as above)
  PUT    /queues/NAME                                    -> {"created":true|false}
  DELETE /queues/NAME  (drops it and its messages)       -> {"dropped":true|false}
  GET    /queues/NAME                                    -> {"name","messages","in_flight"}
  GET    /queues                                         -> {"queues":[...]}

A follower redirects (307) the sends, receives, deletes, visibility
changes, PUT and DELETE to the leader once it is known.
Sends and deletes return once committed by a majority; in-flight deadlines
live on the leader only: when it fails, its messages in flight are handed
out again by the next one (at-least-once).

Nothing is authenticated by default: anyone who reaches --http can send,
receive and delete, anyone who reaches raft's port can speak raft to the
node. Keep raft's addresses on a network only the nodes reach; for the
HTTP API use --tls-cert/--tls-key (HTTPS), --client-ca (mutual TLS) and
--token-file (every POST, PUT and DELETE needs "Authorization: Bearer
TOKEN", else 401).
--peers is read only by a node without raft state; a node whose --peers
disagree with the configuration it stored refuses to start, naming both
(raftstore/README.md says how to change addresses). D records the --id it
was first used with: another --id on it refuses to start, naming both.

flags:
`

// run runs the node until ctx is done (SIGINT or SIGTERM), and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pagelog serve --raft", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	id := fs.String("id", "", "this node's `id` (one of --peers)")
	dir := fs.String("dir", "", "this node's `directory`")
	peers := fs.String("peers", "", "every node as `ID=HOST:PORT` (raft's address), comma-separated")
	raftAddr := fs.String("raft-addr", "", "raft's `host:port` for this node (default: its address in --peers)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "HTTP API `address`")
	vis := fs.Duration("visibility", queue.DefaultVisibility, "how long a received message stays hidden")
	maxBody := fs.Int("max-body", 1<<20, "largest message body in `bytes`")
	snapThreshold := fs.Uint64("snapshot-threshold", 8192, "raft entries between snapshots")
	trailing := fs.Uint64("trailing-logs", 10240, "raft entries kept after a snapshot")
	logLevel := fs.String("log-level", "info", "raft's log level: trace, debug, info, warn, error, off")
	noSync := fs.Bool("no-sync", false, "no fsync of raft's log (tests only: a power loss may lose acknowledged messages)")
	var web httpserve.Options
	web.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "pagelog serve --raft: "+format+"\n", a...)
		fs.Usage()
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case *id == "" || *dir == "" || *peers == "":
		return bad("--id, --dir and --peers are required")
	case *maxBody <= 0 || *maxBody > 64<<20:
		return bad("--max-body %d outside [1, %d]", *maxBody, 64<<20)
	case *vis <= 0 || *vis > queue.MaxVisibility:
		return bad("--visibility %v outside (0, %v]", *vis, queue.MaxVisibility)
	}
	servers, err := parsePeers(*peers)
	if err != nil {
		return bad("--peers: %v", err)
	}
	var self *raft.Server
	for i := range servers {
		if string(servers[i].ID) == *id {
			self = &servers[i]
		}
	}
	if self == nil {
		return bad("--id %s is not in --peers", *id)
	}
	if *raftAddr == "" {
		*raftAddr = string(self.Address)
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return bad("--log-level %q", *logLevel)
	}

	// The token guards the routes that change state (every POST); a
	// receive may wait up to its ?wait on top of the timeouts.
	web.Guarded = func(r *http.Request) bool { return r.Method != http.MethodGet && r.Method != http.MethodHead }
	web.Wait = receiveWait
	setup, err := httpserve.Load(web)
	if err != nil {
		return bad("%v", err)
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		fmt.Fprintf(stderr, "pagelog serve --raft: %v\n", err)
		return 1
	}
	qo := queue.Options{Visibility: *vis}
	qo.Log.MaxRecordBytes = *maxBody
	node, err := rqueue.Start(rqueue.Config{
		ID: *id, Dir: *dir, RaftAddr: *raftAddr, HTTPAddr: ln.Addr().String(),
		Peers: servers, Bootstrap: true, CheckPeers: true, Queue: qo, NoSync: *noSync, LogOutput: stderr,
		Raft: func(c *raft.Config) {
			c.SnapshotThreshold = *snapThreshold
			c.TrailingLogs = *trailing
			c.LogOutput = nil
			c.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft-" + *id, Level: level, Output: stderr})
		},
	})
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "pagelog serve --raft: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "node %s: raft %s, %s://%s (dir %s)\n", *id, *raftAddr, setup.Scheme(), ln.Addr(), *dir)

	srv := setup.Server(node.Handler())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(setup.Listener(ln)) }()
	code := 0
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "pagelog serve --raft: http: %v\n", err)
		code = 1
	}
	// Receives that wait answer 204 at once; other requests get
	// httpserve.DefaultShutdownGrace, then their connections close.
	if err := setup.Shutdown(srv); err != nil {
		fmt.Fprintf(stderr, "pagelog serve --raft: http: %v\n", err)
	}
	if err := node.Close(); err != nil {
		fmt.Fprintf(stderr, "pagelog serve --raft: close: %v\n", err)
		code = 1
	}
	return code
}

// receiveWait is how long a POST /receive (or /queues/NAME/receive) may wait (its ?wait, when
// valid: the handler refuses the others at once). A body, which the
// receive ignores, is still read within --read-timeout (httpserve moves
// only the answer's deadline for it).
func receiveWait(r *http.Request) time.Duration {
	p := r.URL.Path
	if p != "/receive" && !(strings.HasPrefix(p, "/queues/") && strings.HasSuffix(p, "/receive")) {
		return 0
	}
	d, err := time.ParseDuration(r.URL.Query().Get("wait"))
	if err != nil || d < 0 || d > rqueue.MaxWait {
		return 0
	}
	return d
}

// parsePeers parses ID=HOST:PORT,... into raft servers.
func parsePeers(s string) ([]raft.Server, error) {
	var out []raft.Server
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q: want ID=HOST:PORT", p)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %v", p, err)
		}
		if seen[id] || seen[addr] {
			return nil, fmt.Errorf("%q: id or address given twice", p)
		}
		seen[id], seen[addr] = true, true
		out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	return out, nil
}
