package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/walbox/walbox/outbox"
)

// configFile is the YAML configuration file. It holds any setting by its flag name. For
// `walbox run` it also holds the outbox tables with their column mappings:
//
//	database-url: postgres://walbox@db/app
//	amqp-url: amqps://walbox@mq/
//	tables:
//	  - table: public.events
//	    id: event_id
//	    event-type: kind
//	    payload: body
//	    routing-key: "{entity}.{kind}"
type configFile struct {
	values map[string]string
	tables []outbox.Mapping
}

// tableYAML is one entry of tables.
type tableYAML struct {
	Table          string `yaml:"table"`
	ID             string `yaml:"id"`
	AggregateType  string `yaml:"aggregate-type"`
	AggregateID    string `yaml:"aggregate-id"`
	EventType      string `yaml:"event-type"`
	Payload        string `yaml:"payload"`
	Headers        string `yaml:"headers"`
	CreatedAt      string `yaml:"created-at"`
	DeliverAt      string `yaml:"deliver-at"`
	ExchangeColumn string `yaml:"exchange-column"`
	RoutingKey     string `yaml:"routing-key"`
	MessageID      string `yaml:"message-id"`
}

func loadConfigFile(path string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var raw map[string]yaml.Node
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	cf := &configFile{values: map[string]string{}}
	known := fileKeys()
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		node := raw[k]
		if k == "tables" {
			if cf.tables, err = decodeTables(&node); err != nil {
				return nil, fmt.Errorf("config file %s: %w", path, err)
			}
			continue
		}
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("config file %s: unknown setting %q%s", path, k, didYouMean(k, known, "%q"))
		}
		if node.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("config file %s: %s: want a single value", path, k)
		}
		cf.values[k] = node.Value
	}
	return cf, nil
}

func decodeTables(node *yaml.Node) ([]outbox.Mapping, error) {
	if err := checkTableKeys(node); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(node); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	var entries []tableYAML
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	out := make([]outbox.Mapping, 0, len(entries))
	for i, e := range entries {
		t, err := outbox.ParseTable(e.Table)
		if err != nil {
			return nil, fmt.Errorf("tables[%d]: %w", i, err)
		}
		m := outbox.Mapping{Table: t, ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
			EventType: e.EventType, Payload: e.Payload, Headers: e.Headers, CreatedAt: e.CreatedAt,
			DeliverAt:      e.DeliverAt,
			ExchangeColumn: e.ExchangeColumn, RoutingKey: e.RoutingKey, MessageID: outbox.IDSource(e.MessageID)}
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("tables[%d]: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// tableKeys are the keys of an entry of tables, from tableYAML's tags.
func tableKeys() []string {
	t := reflect.TypeOf(tableYAML{})
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i] = t.Field(i).Tag.Get("yaml")
	}
	return keys
}

// checkTableKeys names the first unknown key of an entry of tables, with the nearest known one.
func checkTableKeys(node *yaml.Node) error {
	if node.Kind != yaml.SequenceNode {
		return nil // the decoder says what it wants
	}
	keys := tableKeys()
	for i, entry := range node.Content {
		if err := checkEntryKeys(entry, i, keys, 0); err != nil {
			return err
		}
	}
	return nil
}

// checkEntryKeys checks the keys of one entry of tables. It checks those of the mappings a merge
// key (<<: *defaults) brings into it too.
func checkEntryKeys(entry *yaml.Node, i int, keys []string, depth int) error {
	if entry.Kind == yaml.AliasNode && entry.Alias != nil && depth < 8 {
		return checkEntryKeys(entry.Alias, i, keys, depth+1)
	}
	if entry.Kind == yaml.SequenceNode && depth > 0 { // <<: [*a, *b]
		for _, e := range entry.Content {
			if err := checkEntryKeys(e, i, keys, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if entry.Kind != yaml.MappingNode {
		return nil // the decoder says what it wants
	}
	for j := 0; j+1 < len(entry.Content); j += 2 {
		k := entry.Content[j]
		if k.ShortTag() == "!!merge" {
			if err := checkEntryKeys(entry.Content[j+1], i, keys, depth+1); err != nil {
				return err
			}
			continue
		}
		if !slices.Contains(keys, k.Value) {
			return fmt.Errorf("unknown key %q in tables[%d] (line %d)%s", k.Value, i, k.Line, didYouMean(k.Value, keys, "%q"))
		}
	}
	return nil
}
