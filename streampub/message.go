package streampub

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/walbox/walbox/wire"
)

// The application properties of every message, besides the row's headers.
const (
	PropEventType     = "event_type"
	PropAggregateType = "aggregate_type"
	PropAggregateID   = "aggregate_id"
)

// The application properties of a parked message, as the exchange's park headers.
const (
	PropParkReason   = "x-walbox-reason"
	PropParkTable    = "x-walbox-table"
	PropParkLSN      = "x-walbox-lsn"
	PropParkParkedAt = "x-walbox-parked-at" // RFC 3339 text
	PropParkSize     = "x-walbox-size"      // the payload's size in bytes, an int64
	PropParkHeaders  = "x-walbox-headers"   // the row's own headers as JSON text, if it has any
	PropParkDatabase = "x-walbox-database"  // the row's database, wire.ParkedBy, where known
)

// message builds the stream message of m:
//   - properties.message-id is the message id;
//   - the content type is application/json;
//   - the creation time is the row's created_at;
//   - the event type, aggregate type, aggregate id and the row's headers are application
//     properties, with the producer and the position;
//   - so is the commit time, wire.HeaderCommitTime, when known.
func (s *Session) message(m *wire.Message) (*amqp.AMQP10, error) {
	msg := baseMessage(m)
	msg.ApplicationProperties[PropProducer] = s.cfg.Producer
	msg.ApplicationProperties[PropPosition] = s.pos.String()
	if s.system != "" {
		msg.ApplicationProperties[PropSystem] = s.system
	}
	return msg, nil
}

func baseMessage(m *wire.Message) *amqp.AMQP10 {
	msg := amqp.NewMessage(m.Payload)
	msg.Properties = &amqp.MessageProperties{
		MessageID:    m.AMQPMessageID(),
		ContentType:  "application/json",
		CreationTime: m.CreatedAt,
	}
	props := make(map[string]any, len(m.Headers)+6)
	for k, v := range m.Headers {
		props[k] = propertyValue(v)
	}
	props[PropEventType] = m.EventType
	props[PropAggregateType] = m.AggregateType
	props[PropAggregateID] = m.AggregateID
	if !m.CommitTime.IsZero() {
		props[wire.HeaderCommitTime] = wire.FormatCommitTime(m.CommitTime)
	}
	msg.ApplicationProperties = props
	return msg
}

// propertyValue turns a header's JSON value into one an application property can carry. Simple
// values stay as they are, and lists and objects become their JSON text.
func propertyValue(v any) any {
	switch v := v.(type) {
	case nil, string, bool, float64:
		return v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	}
}

func parkedMessage(p *wire.Parked) *amqp.AMQP10 {
	msg := baseMessage(&p.Message)
	msg.ApplicationProperties[PropParkReason] = p.Reason
	msg.ApplicationProperties[PropParkTable] = p.Table
	msg.ApplicationProperties[PropParkLSN] = p.LSN
	msg.ApplicationProperties[PropParkParkedAt] = time.Now().UTC().Format(time.RFC3339Nano)
	size := p.Size
	if size == 0 {
		size = len(p.Message.Payload)
	}
	msg.ApplicationProperties[PropParkSize] = int64(size)
	if p.Database != "" {
		msg.ApplicationProperties[PropParkDatabase] = p.Database
	}
	if len(p.Message.Headers) > 0 {
		if b, err := json.Marshal(p.Message.Headers); err == nil {
			msg.ApplicationProperties[PropParkHeaders] = string(b)
		}
	}
	return msg
}
