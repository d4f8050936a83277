// Package orders is the example order domain built on walbox: orders whose creation is announced
// by an "order.created" outbox message written in the same transaction as the order row, and the
// notifications a consumer of those messages records.
//
// Store.Create writes an order and its outbox message atomically: both rows commit, or neither.
// The notification handler records each order.created message once, in the consumer's
// transaction, so a redelivered message never produces a second notification.
package orders
