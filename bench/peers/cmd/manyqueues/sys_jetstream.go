package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/pagelog/pagelog/bench/peers/internal/embnats"
)

// jsTimeout bounds every JetStream request; a queue that has a message
// answers at once.
const jsTimeout = 10 * time.Second

// The stream of the one-stream layout; its subjects are q.<name>.
const jsSharedStream = "QUEUES"

// jsMaxConsumers is the shared stream's MaxConsumers: the server's default
// allows 1,000 consumers per stream (JSDefaultMaxConsumersPerStream), and -1
// does not lift it.
const jsMaxConsumers = 1 << 30

// jsReady bounds the server's start, which recovers every stream first.
const jsReady = 10 * time.Minute

func jetstreamStreamsSystem() *system {
	return &system{
		name: "JetStream streams",
		setup: "embedded nats-server v2 (internal/embnats: file store, default sync, in-process client; " +
			"on reopen the server has 10 min to recover its streams). " +
			"A queue = a stream (work-queue retention, file storage, 1 replica, subject q.<name>) and a " +
			"durable pull consumer (AckExplicit). Send = js.Publish (waits for the PubAck); receive = " +
			"Consumer.Next (a fetch of 1) + DoubleAck (waits for the ack's confirmation, which removes " +
			"the message). Touch on reopen = js.Consumer (a consumer-info request).",
		receive: true,
		open: func(dir string) (instance, error) {
			return openJetStream(dir, false)
		},
	}
}

func jetstreamSubjectsSystem() *system {
	return &system{
		name: "JetStream subjects",
		setup: "as JetStream streams, but one stream (QUEUES, work-queue retention, subjects q.>) and a " +
			"queue = a subject q.<name> with its own durable pull consumer filtered on it (work-queue " +
			"retention allows one consumer per subject). The stream's MaxConsumers is 2^30: the " +
			"server's default is 1,000 consumers per stream.",
		receive: true,
		open: func(dir string) (instance, error) {
			return openJetStream(dir, true)
		},
	}
}

type jetstreamQueues struct {
	inst   *embnats.Instance
	shared bool
	cons   map[int]jetstream.Consumer
}

func openJetStream(dir string, shared bool) (instance, error) {
	inst, err := embnats.StartWait(dir, false, jsReady)
	if err != nil {
		return nil, err
	}
	return &jetstreamQueues{inst: inst, shared: shared, cons: make(map[int]jetstream.Consumer)}, nil
}

func (j *jetstreamQueues) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), jsTimeout)
}

func subject(i int) string { return "q." + qname(i) }

// stream is the name of queue i's stream.
func (j *jetstreamQueues) stream(i int) string {
	if j.shared {
		return jsSharedStream
	}
	return "S" + qname(i)
}

func (j *jetstreamQueues) create(i int, first []byte) error {
	ctx, cancel := j.ctx()
	defer cancel()
	if !j.shared || i == 0 {
		subjects := []string{subject(i)}
		if j.shared {
			subjects = []string{"q.>"}
		}
		cfg := jetstream.StreamConfig{
			Name:      j.stream(i),
			Subjects:  subjects,
			Storage:   jetstream.FileStorage,
			Retention: jetstream.WorkQueuePolicy,
			Replicas:  1,
		}
		if j.shared {
			cfg.MaxConsumers = jsMaxConsumers
		}
		if _, err := j.inst.JS.CreateStream(ctx, cfg); err != nil {
			return fmt.Errorf("create stream %s: %w", j.stream(i), err)
		}
	}
	c, err := j.inst.JS.CreateConsumer(ctx, j.stream(i), jetstream.ConsumerConfig{
		Durable:       "C" + qname(i),
		FilterSubject: subject(i),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("create consumer of %s: %w", subject(i), err)
	}
	j.cons[i] = c
	return j.send(i, first)
}

func (j *jetstreamQueues) touch(i int) (int64, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	c, err := j.inst.JS.Consumer(ctx, j.stream(i), "C"+qname(i))
	if err != nil {
		return 0, err
	}
	j.cons[i] = c
	ci := c.CachedInfo()
	return int64(ci.NumPending) + int64(ci.NumAckPending), nil
}

func (j *jetstreamQueues) send(i int, body []byte) error {
	ctx, cancel := j.ctx()
	defer cancel()
	_, err := j.inst.JS.Publish(ctx, subject(i), body)
	return err
}

func (j *jetstreamQueues) receive(i int) error {
	m, err := j.cons[i].Next(jetstream.FetchMaxWait(jsTimeout))
	if err != nil {
		return fmt.Errorf("next of %s: %w", subject(i), err)
	}
	if err := check(m.Data()); err != nil {
		return err
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return m.DoubleAck(ctx)
}

func (j *jetstreamQueues) close() error { return j.inst.Close() }
