// Package doctor is the judgement of `walbox doctor`. It checks that PostgreSQL and RabbitMQ are
// ready for `walbox run` with the same settings. For each check it says whether it passes, warns or
// fails, with the fix. It reads the server through package inspect, as the relay does at the start
// of every session. So doctor and run cannot disagree. The only thing it changes is the broker's
// exchanges, which it declares as run would. See docs/architecture.md for the relay it checks for.
package doctor
