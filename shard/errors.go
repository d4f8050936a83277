package shard

import "errors"

// ErrMismatch means the shards asked for are not the shards that publish the outbox table. The
// count may differ, a publication may be missing, or a row filter may select another shard.
var ErrMismatch = errors.New("shards do not match the publications")

// ErrPositionIDs means a table takes its message ids from positions (wire.IDFromPosition). Yet a
// row filter, a shard's or another, selects its rows: the ids would collide.
var ErrPositionIDs = errors.New("position ids with a row filter")
