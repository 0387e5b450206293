// Package rqueue is a pagelog store of queues replicated by hashicorp/raft:
// the queues' operations are raft commands, applied on every node to a
// pagelog store (queue.Store) of its own, with raft's log kept in a
// raftstore.
//
// # Queues
//
// The store holds any number of named queues. The methods and routes
// without a queue name (Node.Send, POST /send, ...) act on the default
// queue, DefaultQueue ("default"), which every node starts with; the
// others name it (Node.SendTo, POST /queues/NAME/send, ...). A send to a
// queue the cluster lacks creates it (deterministically: it is a raft
// command like any other), as does CreateQueue; DropQueue removes a queue
// and its messages. A receive from a queue the cluster lacks waits as on
// an empty one. Queue names are those of queue.CheckQueueName, less names
// ending in ".dead" (the store's name of a queue's dead letters).
//
// # Commands and ids
//
// A send and a delete go through raft (Node.Send, Node.Delete): they
// return once a majority of the nodes has the command on disk and this
// node has applied it. The FSM gives each message an id, the same on every
// node (1, 2, ... in send order, one sequence over every queue, never
// reused), and keeps per queue a map from id to the offset of the message
// in its local queue (an id deleted under another queue than its own
// deletes nothing): a node restored from a snapshot holds
// the live messages at other offsets than the node that took it. A send
// may carry a due time (fixed by the proposing node, so that every node
// applies the same one) and an ordering group. A delete of an id removes
// the message in whatever state it is (queue.Discard); a delete of an id
// already deleted, or never sent, is counted as nothing and changes
// nothing.
//
// # Receives: at-least-once
//
// Receives are served by the leader alone, from its local queue: bodies
// are read zero-copy from its log (Message.Body follows queue.Message's
// lifetime rule). In-flight deadlines (the visibility timeout,
// ChangeVisibility) live on the leader only and never go through raft.
// When the leader fails or steps down, the new leader's queue holds every
// message not deleted as ready: the messages in flight on the old leader
// are handed out again (at-least-once). A message whose delete was
// acknowledged is never handed out again: the delete was applied on a
// majority, a new leader serves receives only after a barrier has applied
// every entry committed before its term, and a node that loses leadership
// stops serving at once. A leader cut off from the others does not know
// it at once, though: until its lease runs out (raft's LeaderLeaseTimeout)
// it may hand out a message that a new leader's client deleted.
//
// Receive counts (queue.Message.Receives) count the current leader's
// hand-outs. MaxReceives and dead-letter queues are not replicated and are
// refused; deduplication ids are not offered (the queue's dedup window
// uses each node's own clock, which would make nodes disagree).
//
// # Files, restarts and snapshots
//
// A node's directory (Config.Dir) holds raft/ (the raftstore: raft's log,
// term and vote, fsynced per batch, and the id of the node they belong
// to: Start refuses another id with ErrNodeIDChanged), snapshots/ (raft's
// file snapshot store) and queue/ (the local store, in queue/sN/, N
// counting the snapshots installed). The local store is not the durable
// copy: it runs SyncNone, and each start removes it and rebuilds it from
// raft's latest snapshot and the log entries after it. A local store
// that fails to apply a command (a full disk) makes the
// node refuse to serve (ErrFailed) until it is restarted or installs a
// snapshot.
//
// A snapshot holds the FSM's counters, every queue's name and its live
// messages (id, due time, group, body), not the log: its size follows the
// queues' depths. FSM.Snapshot records the live ids and offsets; Persist
// reads the bodies from the local store's files (queue.ReadStore, under
// Store.PauseDrops) while commands go on, and leaves out a message
// deleted meanwhile (the delete follows the snapshot in raft's log).
// Restore fills a new store directory and swaps it in once the whole
// snapshot is read and its CRC-32C checked; a snapshot written before
// named queues (one queue) restores into the default queue. The format
// is in snapshot.go.
//
// # Nodes and HTTP
//
// Start runs a node (raft's TCP transport on Config.RaftAddr, or any
// raft.Transport); Node.Handler is its HTTP API (routes in http.go and
// in the README). cmd/pagelog-raft runs a node from the command line;
// `pagelog serve --raft` runs that command.
package rqueue
