package rqueue_test

import (
	"fmt"

	"github.com/pagelog/pagelog/raftstore/rqueue"
)

// A replicated queue's name is checked before it is proposed: a store's
// queue name that is not one of its dead-letter names.
func ExampleCheckQueueName() {
	fmt.Println(rqueue.CheckQueueName("orders"))
	fmt.Println(rqueue.CheckQueueName("orders.dead") != nil)
	fmt.Println(rqueue.CheckQueueName("") != nil)
	// Output:
	// <nil>
	// true
	// true
}
