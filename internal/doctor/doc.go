// Package doctor is the judgement of `walbox doctor`: it checks that PostgreSQL and RabbitMQ are
// ready for `walbox run` with the same settings, and says for each check whether it passes, warns
// or fails, with the fix. It reads the server through package inspect, as the relay does at the
// start of every session, so that doctor and run cannot disagree; the only thing it changes is
// the broker's exchanges, which it declares as run would.
package doctor
