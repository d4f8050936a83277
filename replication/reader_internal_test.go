package replication

import (
	"errors"
	"sync"
	"testing"
)

// A connection may end right behind frames the stream has not taken yet.
// Examples are WAL and then the server's error, or the end of the socket.
// It must still wake the stream once those frames are handled.
// The stream waits on ready alone while it reads.
// The error is its only word that nothing more will come.
func TestReaderFailureBehindQueuedFramesIsSignalled(t *testing.T) {
	r := &reader{heard: newHeardClock(), onFail: func(error) {}, ready: make(chan struct{}, 1),
		failed: make(chan struct{}), done: make(chan struct{})}
	r.room = sync.NewCond(&r.mu)
	lost := errors.New("server closed the connection")
	r.put(frame{data: []byte{'w'}}, nil) // a frame: ready has a token
	r.put(frame{}, lost)                 // the end: ready is full, so its signal finds the token there

	<-r.ready // the stream wakes for the frame ...
	frames, err := r.take(nil)
	if len(frames) != 1 || err != nil {
		t.Fatalf("take = %d frames, %v; want the frame and no error yet", len(frames), err)
	}
	select { // ... handles it, and waits for more
	case <-r.ready:
	default:
		t.Fatal("the reader failed behind a frame, but nothing wakes the stream to take the error: " +
			"it waits on ready until a status update or the silence bound ends the session")
	}
	if _, err := r.take(nil); !errors.Is(err, lost) {
		t.Fatalf("take after the frames = %v, want %v", err, lost)
	}
}

// Frames copied into one block are independent copies.
// Changing the source, or appending to one copy, leaves the others as they were.
// A frame too large for a block gets its own allocation.
func TestCopyFrameKeepsFramesApart(t *testing.T) {
	r := &reader{}
	src := []byte("first")
	a := r.copyFrame(src)
	b := r.copyFrame([]byte("second"))
	copy(src, "XXXXX")
	a = append(a, "!!!"...)
	if string(a) != "first!!!" || string(b) != "second" {
		t.Fatalf("copies changed: %q, %q", a, b)
	}
	big := make([]byte, frameBlock)
	c := r.copyFrame(big)
	if &c[0] == &big[0] || len(c) != frameBlock {
		t.Fatal("a large frame was not copied on its own")
	}
	d := r.copyFrame([]byte("third"))
	if cap(d) != len(d) || string(d) != "third" {
		t.Fatalf("copy %q has capacity %d beyond its length", d, cap(d))
	}
	// A block that is full starts a new one.
	for range 2 * frameBlock / 100 {
		if f := r.copyFrame(make([]byte, 100)); len(f) != 100 || cap(f) != 100 {
			t.Fatalf("copy of 100 bytes has length %d, capacity %d", len(f), cap(f))
		}
	}
}
