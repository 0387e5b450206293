package rqueue

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// The HTTP API (JSON in and out; every error is {"error": "..."}):
//
//	POST /send        {"body": "text"} or {"body64": "base64"}, with optional
//	                  "delay" ("1.5s", at most queue.MaxDelay) and "group";
//	                  or {"messages": [those]}
//	                  -> 200 {"ids": [1, 2]}
//	POST /receive     ?wait=5s (default 0: do not wait)
//	                  -> 200 {"id", "body" or "body64", "receives", "deadline", "group"}
//	                  -> 204 when no message is ready within wait
//	POST /delete      {"ids": [1, 2]} -> 200 {"deleted": 2}
//	POST /visibility  {"id": 1, "timeout": "30s"} -> 200 {} ("0s" makes it ready now)
//	GET  /status      -> 200 NodeStatus
//	GET  /digest      -> 200 Digest of the live messages (every queue's)
//
// Those act on the default queue (DefaultQueue, "default"). The queue
// NAME (1-255 bytes of UTF-8, no '/' or NUL, not ending in ".dead",
// percent-encoded in the path as any path segment) has the same routes
// under /queues/NAME, and a few of its own:
//
//	POST   /queues/NAME/send, /queues/NAME/receive, /queues/NAME/delete,
//	       /queues/NAME/visibility   as above, on the queue NAME; a send
//	                                 creates the queue, a receive from a
//	                                 queue the cluster lacks waits as on
//	                                 an empty one
//	PUT    /queues/NAME     -> 200 {"created": true} (false: it was there)
//	DELETE /queues/NAME     -> 200 {"dropped": true} (false: no such queue)
//	GET    /queues/NAME     -> 200 {"name", "messages", "in_flight"}, 404 when no such queue
//	GET    /queues          -> 200 {"queues": [{"name", "messages", "in_flight"}, ...]} by name
//
// The GET routes answer from the node asked (a follower's view may lag
// the leader's). Ids are one sequence over every queue: the id of a
// message names it in its queue only (a delete of it under another queue
// deletes nothing).
//
// A node that does not lead answers the sends, receives, deletes,
// visibility changes, creates and drops with 307 Temporary
// Redirect to the leader's address when the leader announced one (curl
// -L follows it), else 503 with the leader's id and raft address. A send
// or delete whose outcome is unknown (raft's timeout, a leadership lost
// while it waited) gets 503 with "unknown": true: it may yet be committed.
//
// A request body is one JSON value (data after it is a 400); one over the
// largest message (base64, in its JSON) is 413, as is a message over the
// node's limit. Every error a client's request causes is a 4xx.

// MaxWait is the longest wait of a receive (POST /receive?wait=).
const MaxWait = time.Hour

// Max bytes of a request body: the largest message, base64, and its JSON.
func (n *Node) maxRequest() int64 { return int64(n.fsm.max)*4/3 + 1<<20 }

type sendItem struct {
	Body   *string `json:"body,omitempty"`
	Body64 *string `json:"body64,omitempty"`
	Delay  string  `json:"delay,omitempty"`
	Group  string  `json:"group,omitempty"`
}

type sendRequest struct {
	sendItem
	Messages []sendItem `json:"messages,omitempty"`
}

type received struct {
	ID       uint64    `json:"id"`
	Body     *string   `json:"body,omitempty"`
	Body64   *string   `json:"body64,omitempty"`
	Receives int       `json:"receives"`
	Deadline time.Time `json:"deadline"`
	Group    string    `json:"group,omitempty"`
}

type apiError struct {
	Error      string `json:"error"`
	Unknown    bool   `json:"unknown,omitempty"`
	LeaderID   string `json:"leader_id,omitempty"`
	LeaderRaft string `json:"leader_raft,omitempty"`
	LeaderHTTP string `json:"leader_http,omitempty"`
}

// Handler returns the node's HTTP API.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"", "/queues/{name}"} {
		mux.HandleFunc("POST "+prefix+"/send", n.handleSend)
		mux.HandleFunc("POST "+prefix+"/receive", n.handleReceive)
		mux.HandleFunc("POST "+prefix+"/delete", n.handleDelete)
		mux.HandleFunc("POST "+prefix+"/visibility", n.handleVisibility)
	}
	mux.HandleFunc("PUT /queues/{name}", func(w http.ResponseWriter, r *http.Request) {
		n.handleQueueOp(w, r, "created", n.CreateQueue)
	})
	mux.HandleFunc("DELETE /queues/{name}", func(w http.ResponseWriter, r *http.Request) {
		n.handleQueueOp(w, r, "dropped", n.DropQueue)
	})
	mux.HandleFunc("GET /queues/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := n.fsm.QueueStatus(r.PathValue("name"))
		if err != nil {
			n.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /queues", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]QueueStatus{"queues": n.Queues()})
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.Status()) })
	mux.HandleFunc("GET /digest", func(w http.ResponseWriter, r *http.Request) {
		d, err := n.Digest()
		if err != nil {
			n.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, d)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers with err: a redirect to the leader, or an error.
func (n *Node) fail(w http.ResponseWriter, r *http.Request, err error) {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		e := apiError{Error: err.Error(), LeaderID: nl.LeaderID, LeaderRaft: nl.LeaderRaft, LeaderHTTP: nl.LeaderHTTP}
		if nl.LeaderHTTP != "" && nl.LeaderID != n.cfg.ID {
			scheme := "http://"
			if r.TLS != nil { // every node serves the same way
				scheme = "https://"
			}
			w.Header().Set("Location", scheme+nl.LeaderHTTP+r.URL.RequestURI())
			writeJSON(w, http.StatusTemporaryRedirect, e)
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, e)
		return
	}
	code := http.StatusInternalServerError
	e := apiError{Error: err.Error()}
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, engine.ErrInvalidAttrs), errors.Is(err, engine.ErrBadOptions),
		errors.Is(err, queue.ErrBadQueueName):
		code = http.StatusBadRequest
	case errors.Is(err, engine.ErrTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNotFound), errors.Is(err, queue.ErrNotInFlight), errors.Is(err, queue.ErrNoQueue):
		code = http.StatusNotFound
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, context.DeadlineExceeded):
		code, e.Unknown = http.StatusServiceUnavailable, true
	case errors.Is(err, ErrClosed), errors.Is(err, ErrFailed):
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, e)
}

var errBadRequest = errors.New("rqueue: bad request")

// decode reads the request's body, one JSON value and nothing after it
// but white space, into v. A body over maxRequest is engine.ErrTooLarge
// (413), anything else wrong errBadRequest (400).
func (n *Node) decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, n.maxRequest()))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return nil
		} else if err == nil {
			err = errors.New("data after the JSON value")
		}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%w: request body over %d bytes", engine.ErrTooLarge, tooLarge.Limit)
	}
	return fmt.Errorf("%w: %v", errBadRequest, err)
}

func (it sendItem) outgoing(now time.Time) (Outgoing, error) {
	var m Outgoing
	switch {
	case it.Body != nil && it.Body64 != nil:
		return m, fmt.Errorf("%w: both body and body64", errBadRequest)
	case it.Body != nil:
		m.Body = []byte(*it.Body)
	case it.Body64 != nil:
		b, err := base64.StdEncoding.DecodeString(*it.Body64)
		if err != nil {
			return m, fmt.Errorf("%w: body64: %v", errBadRequest, err)
		}
		m.Body = b
	default:
		return m, fmt.Errorf("%w: a message needs a body or a body64", errBadRequest)
	}
	if it.Delay != "" {
		d, err := time.ParseDuration(it.Delay)
		if err != nil || d < 0 || d > queue.MaxDelay {
			return m, fmt.Errorf("%w: delay %q: a duration such as 1.5s, in [0, %v]", errBadRequest, it.Delay, queue.MaxDelay)
		}
		if d > 0 {
			m.Due = now.Add(d).UnixMilli() + 1 // rounded up: never before the delay
		}
	}
	m.Group = it.Group
	return m, nil
}

// queueName returns the queue a request names: NAME of /queues/NAME/...,
// the default queue for the routes without it.
func queueName(r *http.Request) string {
	if name := r.PathValue("name"); name != "" {
		return name
	}
	return DefaultQueue
}

// handleQueueOp answers PUT and DELETE /queues/NAME: {key: changed}.
func (n *Node) handleQueueOp(w http.ResponseWriter, r *http.Request, key string, op func(context.Context, string) (bool, error)) {
	changed, err := op(r.Context(), r.PathValue("name"))
	if err != nil {
		n.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{key: changed})
}

func (n *Node) handleSend(w http.ResponseWriter, r *http.Request) {
	name := queueName(r)
	if err := CheckQueueName(name); err != nil {
		n.fail(w, r, err)
		return
	}
	var req sendRequest
	if err := n.decode(w, r, &req); err != nil {
		n.fail(w, r, err)
		return
	}
	items := req.Messages
	single := req.Body != nil || req.Body64 != nil
	switch {
	case single && len(items) > 0:
		n.fail(w, r, fmt.Errorf("%w: a body and messages", errBadRequest))
		return
	case single:
		items = []sendItem{req.sendItem}
	case len(items) == 0 || req.Delay != "" || req.Group != "":
		n.fail(w, r, fmt.Errorf("%w: no body, body64 or messages", errBadRequest))
		return
	}
	now := time.Now()
	msgs := make([]Outgoing, len(items))
	for i, it := range items {
		var err error
		if msgs[i], err = it.outgoing(now); err != nil {
			n.fail(w, r, fmt.Errorf("message %d: %w", i, err))
			return
		}
	}
	first, err := n.SendTo(r.Context(), name, msgs)
	if err != nil {
		n.fail(w, r, err)
		return
	}
	ids := make([]uint64, len(msgs))
	for i := range ids {
		ids[i] = first + uint64(i)
	}
	writeJSON(w, http.StatusOK, map[string][]uint64{"ids": ids})
}

func (n *Node) handleReceive(w http.ResponseWriter, r *http.Request) {
	wait := time.Duration(0)
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxWait {
			n.fail(w, r, fmt.Errorf("%w: wait %q: a duration in [0, %v]", errBadRequest, s, MaxWait))
			return
		}
		wait = d
	}
	name := queueName(r)
	if err := CheckQueueName(name); err != nil {
		n.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(wait, time.Millisecond))
	defer cancel()
	m, err := n.ReceiveFrom(ctx, name)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil && m.ID == 0 {
		n.fail(w, r, err)
		return
	}
	out := received{ID: m.ID, Receives: m.Receives, Deadline: m.Deadline, Group: m.Group}
	if utf8.Valid(m.Body) {
		s := string(m.Body)
		out.Body = &s
	} else {
		s := base64.StdEncoding.EncodeToString(m.Body)
		out.Body64 = &s
	}
	if err != nil { // a damaged record: handed out so that it can be deleted
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error(), "id": m.ID})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) handleDelete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []uint64 `json:"ids"`
	}
	if err := n.decode(w, r, &req); err != nil {
		n.fail(w, r, err)
		return
	}
	if len(req.IDs) == 0 {
		n.fail(w, r, fmt.Errorf("%w: no ids", errBadRequest))
		return
	}
	k, err := n.DeleteFrom(r.Context(), queueName(r), req.IDs)
	if err != nil {
		n.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"deleted": k})
}

func (n *Node) handleVisibility(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID      uint64 `json:"id"`
		Timeout string `json:"timeout"`
	}
	if err := n.decode(w, r, &req); err != nil {
		n.fail(w, r, err)
		return
	}
	d, err := time.ParseDuration(req.Timeout)
	if err != nil || d < 0 || d > queue.MaxVisibility {
		n.fail(w, r, fmt.Errorf("%w: timeout %q: a duration such as 30s, in [0, %v]", errBadRequest, req.Timeout, queue.MaxVisibility))
		return
	}
	if err := n.ChangeVisibilityIn(queueName(r), req.ID, d); err != nil {
		n.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}
