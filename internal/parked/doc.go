// Package parked is `walbox parked`: it lists, shows, replays and discards the messages walbox
// parked. In exchange mode they are in the park queue, in stream mode in the park stream.
//
// The park queue is read by taking its ready messages without acknowledging them. A reader that
// ends, or dies, returns them. Replay publishes a message as the relay would have and waits for the
// broker's confirm. Only then does it remove the parked copies. A kill in between publishes it again
// on the next replay: at least once, never lost. See docs/operations.md for the rest.
package parked
