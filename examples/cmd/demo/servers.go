package main

import (
	"fmt"

	"github.com/walbox/walbox/internal/testenv"
)

// servers are the throwaway PostgreSQL and RabbitMQ the demo runs against.
type servers struct {
	pg     *testenv.Postgres
	rabbit *testenv.Rabbit
}

// startServers starts PostgreSQL (wal_level=logical) and a RabbitMQ node of their own, on free
// ports, from the programs in bins. close stops them and removes their directories; it must be
// called, also after an error.
func startServers(bins binaries) (s servers, closeAll func(), err error) {
	closeAll = func() {
		if s.rabbit != nil {
			s.rabbit.Close()
		}
		if s.pg != nil {
			s.pg.Close()
		}
	}
	if s.pg, err = testenv.NewPostgres(testenv.WithBinDir(bins.pg)); err != nil {
		return s, closeAll, fmt.Errorf("start postgres: %w", err)
	}
	if s.rabbit, err = testenv.NewRabbit(testenv.RabbitBinDir(bins.rabbit)); err != nil {
		return s, closeAll, fmt.Errorf("start rabbitmq: %w", err)
	}
	return s, closeAll, nil
}
