package decoder

// The messages below carry nothing for the relay. They are still parsed with bounds checks, so
// that garbled data surfaces as ErrMalformed instead of passing silently.

// skipType checks a Type message: type OID, namespace, name.
func skipType(r *reader) error {
	r.uint32()
	r.cstring()
	r.cstring()
	return doneOrMalformed(r, "type")
}

// skipOrigin checks an Origin message: origin commit LSN, origin name.
func skipOrigin(r *reader) error {
	r.lsn()
	r.cstring()
	return doneOrMalformed(r, "origin")
}

// skipUpdate checks an Update message: relation id, optional key ('K') or old ('O') tuple,
// new ('N') tuple.
func skipUpdate(r *reader) error {
	r.uint32()
	tag := r.uint8()
	if r.ok() && (tag == 'K' || tag == 'O') {
		if err := skipTuple(r); err != nil {
			return err
		}
		tag = r.uint8()
	}
	if r.ok() && tag != 'N' {
		return malformed("update message with tuple tag %q", []byte{tag})
	}
	if err := skipTuple(r); err != nil {
		return err
	}
	return doneOrMalformed(r, "update")
}

// skipDelete checks a Delete message: relation id, key ('K') or old ('O') tuple.
func skipDelete(r *reader) error {
	r.uint32()
	tag := r.uint8()
	if r.ok() && tag != 'K' && tag != 'O' {
		return malformed("delete message with tuple tag %q", []byte{tag})
	}
	if err := skipTuple(r); err != nil {
		return err
	}
	return doneOrMalformed(r, "delete")
}

// skipTruncate checks a Truncate message: relation count, options, relation ids.
func skipTruncate(r *reader) error {
	n := r.uint32()
	r.uint8() // options
	if r.ok() && uint64(n)*4 != uint64(r.remaining()) {
		return malformed("truncate message of %d relations with %d bytes of ids", n, r.remaining())
	}
	r.take(r.remaining())
	return doneOrMalformed(r, "truncate")
}

func doneOrMalformed(r *reader, what string) error {
	if !r.done() {
		return malformed("truncated or overlong %s message", what)
	}
	return nil
}
