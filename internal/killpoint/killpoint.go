// Package killpoint names the boundaries in walbox's commands where a fault test kills walbox.
//
// A walbox built with the build tag killpoints reads WALBOX_KILL_POINT=name:N. It SIGKILLs itself
// the Nth time the point name is hit. Without the tag, Hit is an empty function that the compiler
// inlines away. This is for testing only; it is not a setting of the product. See
// docs/architecture.md for the packages that call it.
package killpoint

// Points lists every point, as the code names it in its call to Hit. A test checks that each is
// hit exactly once in the code and that the code hits no other.
var Points = []string{
	"begin",              // a transaction's Begin decoded, before its first change
	"row.next",           // between two changes of one transaction, before the later row is published
	"publish.sent",       // a message published, not yet confirmed
	"confirm.acked",      // a message confirmed, its position not yet recorded
	"report.recorded",    // a position recorded, not yet sent to the server
	"report.sent",        // a position sent to the server
	"keepalive",          // a keepalive advanced the idle position
	"standby.took",       // a standby holds the slot, the other relay gone, and streams nothing yet
	"recover.created",    // recover created the new slot, published nothing of the gap yet
	"recover.published",  // recover published the gap, all confirmed, the record not yet reset
	"prune.deleted",      // prune deleted a batch and counted it, not yet committed
	"reshard.published",  // reshard created the new set's publications, no slot yet
	"slot.created",       // a slot created (migrate, reshard), not yet recorded
	"run.created",        // walbox run created its missing slot, not yet recorded
	"reshard.slot",       // reshard created and recorded a slot of the new set, the next not yet
	"retire.dropped",     // retire dropped an old slot, its record not yet forgotten
	"retire.forgot",      // retire forgot an old slot's record; the next slot, or the publications, not yet
	"stream.flushed",     // the stream publisher wrote a batch to the broker, none of it confirmed yet
	"stream.stored",      // the stream publisher confirmed at once a message the stream holds already
	"schedule.handed",    // a message due later handed to the schedule, its record not yet written
	"schedule.confirmed", // due messages sent and confirmed, not yet deleted from the schedule
	"parked.confirmed",   // walbox parked replayed a message, confirmed, its parked copies not yet removed
	"parked.stored",      // walbox parked replayed an entry into the stream, confirmed, not yet recorded
}

// Env is the environment variable that arms a point: name:N.
const Env = "WALBOX_KILL_POINT"
