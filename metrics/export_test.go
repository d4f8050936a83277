package metrics

// Reason and SetSlot let the tests of package metrics_test check what the slot poller records.
var Reason = reason

func (m *Metrics) SetSlot(retained int64, walStatus string) { m.setSlot(retained, walStatus) }
