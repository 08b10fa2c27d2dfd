package sessiondb

// Holds reports whether c holds the session.
func (c *Cache) Holds(app, user, id string) bool {
	_, ok := c.newest(sessionKey{app, user, id})
	return ok
}

// Bytes is how many bytes c counts as held.
func (c *Cache) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
