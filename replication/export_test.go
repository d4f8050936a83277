package replication

// Retryable is retryable, for the tests of package replication_test.
var Retryable = retryable
