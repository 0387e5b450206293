package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/pagelog/pagelog/bench/peers/internal/embnats"
)

func jetstreamSystem() system {
	return system{
		name: "JetStream",
		setup: "embedded nats-server v2 (JetStream on, file store in the scratch dir, host 127.0.0.1, " +
			"random port, DontListen: the client connects in-process with nats.InProcessServer), driven " +
			"with nats.go's jetstream package. Page-cache appends: server default sync (SyncInterval " +
			"2 min); synced appends: server SyncAlways (fsync per message before the PubAck). Append = " +
			"js.Publish, which waits for the PubAck. Stream: file storage, 1 replica, limits retention, " +
			"AllowDirect; default block size (8 MiB limits, 4 MiB work queue). Read: Stream.GetMsg by " +
			"sequence as a direct get (the block's highwayhash is checked on the first load of a message " +
			"into the cache). Queue: work-queue retention stream, durable pull consumer (AckExplicit), " +
			"consumed with Consumer.Messages; cycle = Publish, Next, DoubleAck (waits for the server " +
			"to confirm the ack, which removes the message).",
		support: func(workload) string { return "" },
		open:    openJetStream,
	}
}

// natsInstance is an embedded server and an in-process client.
type natsInstance struct{ *embnats.Instance }

func startNATS(dir string, syncAlways bool) (*natsInstance, error) {
	inst, err := embnats.Start(dir, syncAlways)
	if err != nil {
		return nil, err
	}
	return &natsInstance{inst}, nil
}

func (n *natsInstance) close() error { return n.Close() }

func openJetStream(w workload, dir string, n int) (*store, error) {
	inst, err := startNATS(dir, w.Sync)
	if err != nil {
		return nil, err
	}
	st, err := openJetStreamWork(inst, w, n)
	if err != nil {
		inst.close()
		return nil, err
	}
	return st, nil
}

func openJetStreamWork(inst *natsInstance, w workload, n int) (*store, error) {
	ctx := context.Background()
	body := makeBody(w.Size)
	js := inst.JS
	cfg := jetstream.StreamConfig{
		Name:        "BENCH",
		Subjects:    []string{"bench"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    1,
		AllowDirect: true,
	}
	if w.Kind == kindCycle {
		cfg.Retention = jetstream.WorkQueuePolicy
	}
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		return nil, err
	}
	switch w.Kind {
	case kindAppend:
		return &store{
			do: func(int) error {
				_, err := js.Publish(ctx, "bench", body)
				return err
			},
			close: inst.close,
		}, nil
	case kindRead:
		if err := fillJetStream(js, body, n); err != nil {
			return nil, err
		}
		picks := recentPicks(n)
		return &store{
			do: func(i int) error {
				m, err := stream.GetMsg(ctx, uint64(picks[i&4095]+1))
				if err != nil {
					return err
				}
				return touch(m.Data, w.Size)
			},
			close: inst.close,
		}, nil
	case kindCycle:
		return openJetStreamQueue(inst, stream, body, w.Size)
	}
	return nil, errUnsupported
}

// fillJetStream publishes n messages asynchronously, 1000 in flight at most.
func fillJetStream(js jetstream.JetStream, body []byte, n int) error {
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync("bench", body); err != nil {
			return err
		}
		if i%1000 == 999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				return errors.New("async publishes not acknowledged after 30 s")
			}
		}
	}
	return nil
}

func openJetStreamQueue(inst *natsInstance, stream jetstream.Stream, body []byte, size int) (*store, error) {
	ctx := context.Background()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "worker",
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	return &store{
		do: func(int) error {
			if _, err := inst.JS.Publish(ctx, "bench", body); err != nil {
				return err
			}
			m, err := it.Next()
			if err != nil {
				return fmt.Errorf("next: %w", err)
			}
			if err := touch(m.Data(), size); err != nil {
				return err
			}
			return m.DoubleAck(ctx)
		},
		close: func() error {
			it.Stop()
			return inst.close()
		},
	}, nil
}
