package inspect

import (
	"context"
	"fmt"
	"slices"

	"github.com/walbox/walbox/migrations"
)

// StrayRecord is a table walbox_slots or a record function (migrations.RecordFunctions) in a schema
// other than the registry's. But walbox never reads or calls it. A role that may CREATE in that
// schema may have planted it there.
type StrayRecord struct {
	Kind  string // "table" or "function"
	Name  string // quoted, with its schema, and with its parameter types for a function
	Owner string
}

// ReadStrayRecords returns the tables walbox_slots and the record functions found in schemas other
// than registry. The schema registry holds walbox's record.
func ReadStrayRecords(ctx context.Context, q Querier, registry string, schemas []string) ([]StrayRecord, error) {
	var others []string
	for _, s := range schemas {
		if s != registry && !slices.Contains(others, s) {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		return nil, nil
	}
	var kinds, names, owners []string
	err := q.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(kind ORDER BY name), '{}'),
			coalesce(pg_catalog.array_agg(name ORDER BY name), '{}'), coalesce(pg_catalog.array_agg(owner ORDER BY name), '{}')
		FROM (SELECT 'table' AS kind, pg_catalog.quote_ident(n.nspname) || '.walbox_slots' AS name,
				pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text AS owner
			FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relname = 'walbox_slots' AND n.nspname = ANY($1::pg_catalog.text[])
		UNION ALL
		SELECT 'function', pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname) || '(' ||
				pg_catalog.pg_get_function_identity_arguments(p.oid) || ')', pg_catalog.pg_get_userbyid(p.proowner)::pg_catalog.text
			FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
			WHERE p.proname = ANY($2::pg_catalog.text[]) AND n.nspname = ANY($1::pg_catalog.text[])) found`,
		others, migrations.RecordFunctions).Scan(&kinds, &names, &owners)
	if err != nil {
		return nil, fmt.Errorf("look up walbox_slots and the record functions outside schema %s: %w", registry, err)
	}
	stray := make([]StrayRecord, len(names))
	for i := range names {
		stray[i] = StrayRecord{Kind: kinds[i], Name: names[i], Owner: owners[i]}
	}
	return stray, nil
}
