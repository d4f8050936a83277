package replication

// finalStatus reports the watermark after a broker failure, having first applied the confirms
// that had already arrived: a publish that failed or gave up left them unread. Applying stops at
// the first failed confirm, and the watermark never passes one, so this confirms nothing the
// broker did not. Errors change nothing: the session is over.
func (s *stream) finalStatus() {
	_ = s.drainConfirms(s.pub.Confirms())
	_ = s.sendStatus()
}
