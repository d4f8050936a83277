package shard

// ParseName lets the tests of package shard_test read derived names.
var ParseName = parseName
