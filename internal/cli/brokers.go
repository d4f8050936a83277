package cli

// amqpURLs returns the --amqp-url list with the --amqp-password in every URL of it.
func (c *common) amqpURLs() ([]string, error) {
	if len(c.v.amqpURLs) == 0 {
		return nil, badSetting(c.s.get("amqp-url"), "required")
	}
	urls := append([]string(nil), c.v.amqpURLs...)
	if c.v.amqpPassword == "" {
		return urls, nil
	}
	var err error
	for i := range urls {
		if urls[i], err = withURLPassword(urls[i], c.v.amqpPassword); err != nil {
			if len(urls) > 1 {
				return nil, badSetting(c.s.get("amqp-password"), "url %d of %d: %v", i+1, len(urls), err)
			}
			return nil, badSetting(c.s.get("amqp-password"), "%v", err)
		}
	}
	return urls, nil
}
