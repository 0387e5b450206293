// Package metrics exports a pagelog log's and a queue's figures to
// Prometheus. It is a Go module of its own, so that the pagelog library
// keeps golang.org/x/sys as its only dependency.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewLogCollector(l, "events"))   // label log="events"
//	reg.MustRegister(metrics.NewQueueCollector(q, "jobs"))   // label queue="jobs"
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The collectors read Log.Stats and Queue.Stats when they are scraped:
// they run no goroutine and keep no state, and a scrape costs one Stats
// call (a log of 10,000 segments is scraped in well under a millisecond;
// see BenchmarkScrape). The counters (_total) count from the Open of the
// Log or Queue the collector was given: they start again at 0 when the
// process reopens it, which Prometheus' rate() and increase() handle as a
// counter reset.
//
// # Log metrics (label log)
//
//	pagelog_first_offset                  gauge      oldest offset the log holds
//	pagelog_next_offset                   gauge      offset the next append gets
//	pagelog_durable_offset                gauge      every offset below it is synced
//	pagelog_segments                      gauge      segment files
//	pagelog_log_bytes                     gauge      bytes of records in them
//	pagelog_mapped_segments               gauge      segments mapped in memory now
//	pagelog_appends_total                 counter    records appended
//	pagelog_appended_bytes_total          counter    their bytes on disk, headers included
//	pagelog_reads_total                   counter    successful Read calls
//	pagelog_syncs_total                   counter    fdatasync rounds (group commits)
//	pagelog_sync_duration_seconds         histogram  their durations (buckets: engine.SyncBuckets)
//	pagelog_last_sync_batch_records       gauge      records the last sync made durable
//	pagelog_sync_failed                   gauge      1 once a sync failed: appends are refused until reopen
//	pagelog_recovery_duration_seconds     gauge      how long Open took
//	pagelog_recovery_clean                gauge      1 when Open found a clean close
//	pagelog_recovery_truncated_bytes      gauge      torn tail Open cut
//	pagelog_recovery_indexes_rebuilt      gauge      indexes Open repaired
//	pagelog_recovery_leftover_files       gauge      index files without their segment
//	pagelog_recycled_segments_total       counter    segments made from a dropped segment's file
//	pagelog_recycled_files                gauge      dropped segment files kept for reuse now
//
// A queue collector exports its message log's figures too, as these log
// metrics with log=<the queue's name> (disk, syncs and the sticky sync
// error of a queue are alerted on through them).
//
// # Queue metrics (label queue)
//
//	pagelog_queue_messages{state}                 gauge    messages not deleted, by state
//	pagelog_queue_depth                           gauge    messages not deleted (every state)
//	pagelog_queue_ready_again_messages            gauge    ready messages that were handed out before
//	pagelog_queue_end_offset                      gauge    offset of the next send
//	pagelog_queue_head_offset                     gauge    oldest message not deleted
//	pagelog_queue_cursor_offset                   gauge    oldest message not looked at since Open
//	pagelog_queue_checkpointed_offset             gauge    head written in queue.head
//	pagelog_queue_oldest_message_age_seconds      gauge    age of the head message (0: none)
//	pagelog_queue_dead_letters                    gauge    messages in the dead-letter queue
//	pagelog_queue_groups                          gauge    ordering groups with messages
//	pagelog_queue_groups_waiting                  gauge    of them, with a message behind an earlier one
//	pagelog_queue_dedup_ids                       gauge    deduplication ids remembered
//	pagelog_queue_sent_total                      counter  messages sent
//	pagelog_queue_received_total                  counter  hand-outs, redeliveries included
//	pagelog_queue_redelivered_total               counter  hand-outs of a message handed out before
//	pagelog_queue_deleted_total                   counter  messages deleted
//	pagelog_queue_dead_lettered_total             counter  messages moved to the dead letters
//	pagelog_queue_redriven_total                  counter  dead letters moved back
//	pagelog_queue_checkpoint_failed               gauge    1 when the last head checkpoint failed
//	pagelog_queue_dead_letter_move_failed         gauge    1 when the last move to the dead letters failed
//
// The states of pagelog_queue_messages are ready, in_flight, delayed,
// waiting (grouped, behind an earlier message of its group) and dying (to be
// moved to the dead letters); they add up to pagelog_queue_depth. A
// message the queue has not looked at since Open counts as ready (see
// queue.Stats: a delayed or grouped one is known as such once a receiver
// passes it).
//
// A queue's dead-letter queue is a Queue of its own: register
// NewQueueCollector(q.DeadLetter(), name+".dead") to watch it whole.
//
// # Store metrics (label store)
//
// A store (queue.Store: many queues in one directory) is exported whole
// by NewStoreCollector(s, name, opts): its totals, its deepest queues and
// its message log's figures (log=<name>), and no label per queue unless
// StoreOptions.PerQueue asks for one (a series per queue of 100,000
// queues is an outage for Prometheus).
//
//	pagelog_store_queues                          gauge    queues in the store
//	pagelog_store_open_queues                     gauge    of them, open in this process
//	pagelog_store_messages                        gauge    messages not deleted, over every queue
//	pagelog_store_in_flight_messages              gauge    handed out and not deleted, over the open queues
//	pagelog_store_checkpoint_failed               gauge    1 when the store's last checkpoint failed
//	pagelog_store_deepest_queue_messages{queue}   gauge    the deepest queues (at most queue.StoreStatsDeepest)
//	pagelog_store_queue_messages{queue}           gauge    every queue (PerQueue only)
//	pagelog_store_queue_in_flight_messages{queue} gauge    every open queue (PerQueue only)
//
// A queue of a store may also get a NewQueueCollector of its own, for the
// few queues worth every figure.
//
// `pagelog serve --dir D` serves the same names for a directory that
// another process has open, read from its files (offsets, segments, bytes,
// depth, oldest message age); the counters that only the owning process
// knows are absent there.
package metrics
