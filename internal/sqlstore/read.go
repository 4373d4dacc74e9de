package sqlstore

import "fmt"

// MaxEventsRead bounds what the drivers' Events and EventsTx return. They
// serve tests, which look at a handful of rows; a test pointed at a shared
// database that holds many more should narrow its read by topic, and learn
// that it must, rather than have the whole table loaded into memory.
const MaxEventsRead = 10000

// TooManyEvents is the error of a read that found more than max rows.
func TooManyEvents(max int, topics []string) error {
	if len(topics) == 0 {
		return fmt.Errorf("more than %d events in the outbox: name the topics to read", max)
	}
	return fmt.Errorf("more than %d events on topics %q", max, topics)
}
