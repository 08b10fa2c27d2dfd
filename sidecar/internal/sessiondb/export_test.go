package sessiondb

// Holds reports whether c holds the session.
func (c *Cache) Holds(app, user, id string) bool {
	_, ok := c.newestTime(sessionKey{app, user, id})
	return ok
}

// Bytes is how many bytes c counts as held.
func (c *Cache) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Corrupt makes c's entry of the session undecodable.
func (c *Cache) Corrupt(app, user, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[sessionKey{app, user, id}].state[0] = []byte("{")
}

// Len is how many sessions c holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
