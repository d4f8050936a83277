package shard

import "errors"

// ErrMismatch means the shards asked for are not the shards that publish the outbox table: a
// different count, a missing publication, or a row filter that selects another shard.
var ErrMismatch = errors.New("shards do not match the publications")
