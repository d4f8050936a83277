package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/wire"
)

// Querier is the part of a pgx connection, pool or transaction the package reads through.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Reader is a Querier that also reads single rows, as package inspect does.
type Reader interface {
	Querier
	inspect.Querier
}

// Claim is a publication, named after the base publication, that publishes the outbox table.
type Claim struct {
	Publication string
	Filter      string // the row filter as the server shows it; "" for none
	K, N        int    // the shard its name says it serves (N = 1: the single slot)
}

// Layout is every set of shards, the single slot included, whose publications publish the outbox
// table. It is what `walbox migrate` and `walbox reshard` created.
type Layout struct {
	Table  wire.Table
	Base   Set // the base names; N is unused
	Claims []Claim
}

// ReadLayout reads the publications named after base.Publication that publish table.
func ReadLayout(ctx context.Context, q Querier, table wire.Table, base Set) (Layout, error) {
	l := Layout{Table: table, Base: base}
	rows, err := q.Query(ctx, `SELECT pubname::text, coalesce(rowfilter, '') FROM pg_publication_tables
		WHERE schemaname = $1 AND tablename = $2 ORDER BY pubname`, table.Schema, table.Name)
	if err != nil {
		return l, fmt.Errorf("read the publications of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var c Claim
		if err := rows.Scan(&c.Publication, &c.Filter); err != nil {
			return l, fmt.Errorf("read the publications of %s: %w", table, err)
		}
		var ok bool
		if c.K, c.N, ok = parseName(base.Publication, c.Publication); ok {
			l.Claims = append(l.Claims, c)
		}
	}
	if err := rows.Err(); err != nil {
		return l, fmt.Errorf("read the publications of %s: %w", table, err)
	}
	return l, nil
}

// Counts returns the shard counts of the sets that have at least one publication, in order.
func (l Layout) Counts() []int {
	var ns []int
	for _, c := range l.Claims {
		if !slices.Contains(ns, c.N) {
			ns = append(ns, c.N)
		}
	}
	slices.Sort(ns)
	return ns
}

// Set returns the set of n shards with the base names.
func (l Layout) Set(n int) Set { return Set{Slot: l.Base.Slot, Publication: l.Base.Publication, N: n} }

// claim returns the publication of shard k of n, if there is one.
func (l Layout) claim(k, n int) (Claim, bool) {
	for _, c := range l.Claims {
		if c.K == k && c.N == n {
			return c, true
		}
	}
	return Claim{}, false
}

// Check reports a publication whose row filter does not select the shard its name says. It reports
// a set that lacks a shard's publication too. Both are rows no relay would deliver, or deliver
// twice.
func (l Layout) Check() error {
	for _, c := range l.Claims {
		if err := c.check(); err != nil {
			return err
		}
	}
	for _, n := range l.Counts() {
		for k := range n {
			if _, ok := l.claim(k, n); !ok {
				return fmt.Errorf("%w: publication %s of shard %d of %d does not publish %s, so its rows reach no relay; "+
					"run `walbox migrate --shards %d` to create it", ErrMismatch, l.Set(n).PublicationName(k), k, n, l.Table, n)
			}
		}
	}
	return nil
}

func (c Claim) check() error { return c.checkAgainst("its name says") }

// checkAgainst checks the filter against c.K of c.N; expected says where those come from.
func (c Claim) checkAgainst(expected string) error {
	col, k, n, ok := ParseFilter(c.Filter)
	switch {
	case !ok:
		return fmt.Errorf("%w: publication %s has the row filter %s, which walbox did not write; %s shard %d of %d",
			ErrMismatch, c.Publication, c.Filter, expected, c.K, c.N)
	case k != c.K || n != c.N || (n > 1 && col != column):
		return fmt.Errorf("%w: publication %s selects %s, but %s %s",
			ErrMismatch, c.Publication, describe(k, n, c.Filter), expected, describe(c.K, c.N, ""))
	}
	return nil
}

func describe(k, n int, filter string) string {
	if n == 1 {
		return "every row (no row filter)"
	}
	if filter != "" {
		return fmt.Sprintf("shard %d of %d (row filter %s)", k, n, filter)
	}
	return fmt.Sprintf("shard %d of %d", k, n)
}

// String says what relays the table. It says "public.outbox is published by 2 shards (walbox_s0of2
// ... walbox_s1of2)". Or it says "by no publication named after walbox".
func (l Layout) String() string {
	ns := l.Counts()
	if len(ns) == 0 {
		return fmt.Sprintf("%s is published by no publication named after %s", l.Table, l.Base.Publication)
	}
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = l.Set(n).String()
	}
	return fmt.Sprintf("%s is published by %s", l.Table, strings.Join(parts, " and by "))
}

// Resolve checks that shard k of n is what walbox migrate created. Its publication publishes the
// table with the row filter of shard k of n. A count n = 0 takes the count from the layout, which
// must then hold exactly one sharded set. It returns the set.
func (l Layout) Resolve(k, n int) (Set, error) {
	if n == 0 {
		var sharded []int
		for _, c := range l.Counts() {
			if c > 1 {
				sharded = append(sharded, c)
			}
		}
		switch len(sharded) {
		case 0:
			return Set{}, fmt.Errorf("%w: --shard %d, but %s; run `walbox migrate --shards N` first", ErrMismatch, k, l)
		case 1:
			n = sharded[0]
		default:
			return Set{}, fmt.Errorf("%w: --shard %d without --shards, but %s (a reshard is in progress): give --shards",
				ErrMismatch, k, l)
		}
	}
	s := l.Set(n)
	if err := s.Validate(); err != nil {
		return s, err
	}
	if k < 0 || k >= n {
		return s, fmt.Errorf("%w: --shard %d: must be 0 to %d for %d shards", ErrMismatch, k, n-1, n)
	}
	c, ok := l.claim(k, n)
	if !ok {
		return s, fmt.Errorf("%w: --shards %d --shard %d needs publication %s, but %s. Run with the count walbox migrate "+
			"created, or change the count with `walbox reshard --shards %d`", ErrMismatch, n, k, s.PublicationName(k), l, n)
	}
	return s, c.check()
}

// CheckMigrate reports whether `walbox migrate` may set up n shards (1: the single slot) beside
// what exists. It may only where no other set publishes the table. Or n's set may exist already: a
// reshard in progress. Changing the count is `walbox reshard`'s job.
func (l Layout) CheckMigrate(n int) error {
	ns := l.Counts()
	if len(ns) == 0 || slices.Contains(ns, n) {
		return nil
	}
	what := fmt.Sprintf("--shards %d", n)
	if n == 1 {
		what = "one slot (no --shards)"
	}
	return fmt.Errorf("%w: %s, but %s; both would relay the same rows. Run migrate with the count it was created with, "+
		"or change the count with `walbox reshard --shards %d`", ErrMismatch, what, l, n)
}

// CheckPublication checks that publication publishes table with the row filter of shard k of n.
// Every session of a sharded relay does so. A filter changed behind its back would leave rows to no
// relay, or to two. A publication dropped, or with the table taken out, gets the error of
// inspect.ReadCoverage. That is inspect.ErrNoPublication or inspect.ErrNotCovered. The relay's
// coverage check reads just before this check, and either may see the change first. Both must name
// the same stop.
func CheckPublication(ctx context.Context, q Reader, publication string, table wire.Table, k, n int) error {
	rows, err := q.Query(ctx, `SELECT coalesce(rowfilter, '') FROM pg_catalog.pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, publication, table.Schema, table.Name)
	if err != nil {
		return fmt.Errorf("read the row filter of publication %s: %w", publication, err)
	}
	filters, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the row filter of publication %s: %w", publication, err)
	}
	if len(filters) == 0 {
		c, err := inspect.ReadCoverage(ctx, q, publication, []wire.Table{table})
		if err != nil {
			return err
		}
		if err := c.Err(); err != nil {
			return err
		}
		// It publishes the table again: it was taken out and put back between the two reads.
		return fmt.Errorf("%w: publication %q published no table %s for a moment, and rows written then were not "+
			"decoded. If rows were written meanwhile, run `walbox recover --force`", inspect.ErrNotCovered, publication, table)
	}
	return Claim{Publication: publication, Filter: filters[0], K: k, N: n}.checkAgainst("this relay streams")
}
