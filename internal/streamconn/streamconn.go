// Package streamconn holds the stream client's connection settings that walbox uses everywhere.
// See docs/architecture.md for the packages that use the stream client.
package streamconn

import "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

// Options returns the client's default environment options, with the socket buffers left to the
// kernel.
//
// The client sets each socket's buffers to 8 KB by default; Linux makes that 16 KB. The receive
// window is then smaller than one loopback segment (64 KB). The window keeps closing, and the
// broker's next send waits for a TCP timer of about 200 ms. A consumer so reads about 16 KB per
// 200 ms. That is a few hundred messages a second, with pauses of a second or two between chunks. Over a
// network the small window still caps a reader at 16 KB per round trip. With no size set, the
// kernel sizes the buffers and grows them while the reader keeps up.
func Options() *stream.EnvironmentOptions {
	return stream.NewEnvironmentOptions().SetReadBuffer(0).SetWriteBuffer(0)
}
