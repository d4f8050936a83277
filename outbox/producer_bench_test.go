package outbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/walbox/walbox/outbox"
)

// BenchmarkWrite measures a committed transaction holding one Write of n messages.
func BenchmarkWrite(b *testing.B) {
	conn, _ := newDB(b)
	ctx := context.Background()
	for _, n := range []int{1, 10, 100, 1000} {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = msg(i)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				tx, err := conn.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := outbox.Write(ctx, tx, msgs...); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
