package status

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Relay is the JSON of the running relay's /status: what it is doing.
type Relay struct {
	State         string `json:"state"`
	Slot          string `json:"slot"`
	LastError     string `json:"last_error,omitempty"`
	Published     uint64 `json:"published"`
	Confirmed     uint64 `json:"confirmed"`
	Parked        uint64 `json:"parked"`
	InFlight      int64  `json:"in_flight"`
	Sessions      uint64 `json:"sessions"`
	ConfirmedLSN  string `json:"confirmed_lsn"`
	ReceivedLSN   string `json:"received_lsn"`
	ServerWALLSN  string `json:"server_wal_lsn"`
	BrokerBlocked bool   `json:"broker_blocked"`
	// Broker is host:port of the RabbitMQ node the relay is connected to; empty when none.
	Broker string `json:"broker"`
}

// FetchRelay reads the running relay's /status at base, within two seconds.
func FetchRelay(ctx context.Context, base string) (*Relay, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /status: %s", resp.Status)
	}
	var rs Relay
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		return nil, fmt.Errorf("GET /status: %w", err)
	}
	return &rs, nil
}
