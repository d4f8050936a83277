package cli

import "github.com/walbox/walbox/publisher"

// amqpURLs reads the --amqp-url list and puts the --amqp-password into every URL of it.
func amqpURLs(list, password *setting) ([]string, error) {
	raw, err := list.required()
	if err != nil {
		return nil, err
	}
	urls, err := publisher.ParseURLs(raw)
	if err != nil {
		return nil, badSetting(list, "%v", err)
	}
	if password.value == "" {
		return urls, nil
	}
	for i := range urls {
		if urls[i], err = withURLPassword(urls[i], password.value); err != nil {
			if len(urls) > 1 {
				return nil, badSetting(password, "url %d of %d: %v", i+1, len(urls), err)
			}
			return nil, badSetting(password, "%v", err)
		}
	}
	return urls, nil
}
