package shard

import "errors"

// ErrMismatch means the shards asked for are not the shards that publish the outbox table: a
// different count, a missing publication, or a row filter that selects another shard.
var ErrMismatch = errors.New("shards do not match the publications")

// ErrPositionIDs means a table takes its message ids from positions (wire.IDFromPosition) while
// a row filter, a shard's or another, selects its rows: the ids would collide.
var ErrPositionIDs = errors.New("position ids with a row filter")
