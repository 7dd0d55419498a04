package natsstore

// Indexes returns how many session indexes l keeps.
func Indexes(l *Log) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sessions)
}
